"""stepwatch's zero-code hook, put first on PYTHONPATH by ``stepwatch run`` (the pattern of
ddtrace-run and opentelemetry-instrument). Runs at the start of every Python process the
command starts; does almost nothing there:

- only with STEPWATCH_AUTO_ATTACH=1 and, under torchrun, only in the workers (LOCAL_RANK
  set), not in the launcher; multiprocessing children are not excluded: ``mp.spawn`` workers
  are the trainers, and spawned DataLoader workers never step an optimizer (see below);
- it imports nothing heavy: a post-import hook waits for ``torch.optim.optimizer`` and then
  registers a global optimizer pre-step hook whose first call attaches the agent. A Python
  process that never steps an optimizer (tools, the torchrun agent, data workers) never gets an
  agent or a sidecar; a training process is reported from its first optimizer step on.
- then the environment's own sitecustomize, if any, is imported as if this one were not here.

Never raises: a failure is one line on stderr and the program runs on unchanged.
"""

import os
import sys


def _wanted() -> bool:
    if os.environ.get("STEPWATCH_AUTO_ATTACH") != "1":
        return False
    if os.environ.get("TORCHELASTIC_RUN_ID") and not os.environ.get("LOCAL_RANK"):
        return False  # the torchrun launcher itself
    return True


class _AfterImport:
    """A meta-path finder that runs ``then(module)`` once ``name`` has been executed."""

    def __init__(self, name, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, then = spec.loader, self.then

        class _Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                try:
                    then(module)
                except Exception as exc:  # never into the program
                    print(f"stepwatch: auto-attach disabled: {exc!r}", file=sys.stderr)

        spec.loader = _Loader()
        return spec


def _install(optimizer_module) -> None:
    # A global *pre*-step hook: attach() registers the agent's own post-step hook, which must not
    # happen while torch iterates the post hooks. It stays registered (removing it inside the
    # hook loop would change the dict torch iterates); after the first call it is one test.
    done = []

    def first_step(optimizer, args, kwargs):
        if done:
            return
        done.append(True)
        try:
            from stepwatch import agent
            from stepwatch.agent import _api
            if agent.current() is None:  # the script may have attached itself already
                _api.attach(_defer=False)  # (inside a step already)
        except Exception as exc:
            print(f"stepwatch: auto-attach failed, training goes on without it: {exc!r}", file=sys.stderr)

    optimizer_module.register_optimizer_step_pre_hook(first_step)


def _chain() -> None:
    """Import the sitecustomize this one shadows (the next one on sys.path), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        import importlib
        importlib.import_module("sitecustomize")
    except ImportError:
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    finally:
        sys.path[:] = saved


try:
    if _wanted():
        sys.meta_path.insert(0, _AfterImport("torch.optim.optimizer", _install))
except Exception as _exc:  # noqa: BLE001
    print(f"stepwatch: auto-attach disabled: {_exc!r}", file=sys.stderr)
_chain()
