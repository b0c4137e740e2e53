"""Collector options: precedence and clear errors."""

from __future__ import annotations

import pytest

from stepwatch.collector._config import SettingsError, load_settings


def write(tmp_path, text: str) -> str:
    path = tmp_path / "collector.yaml"
    path.write_text(text)
    return str(path)


def test_defaults():
    s = load_settings(environ={})
    assert (s.grpc_listen, s.http_listen, s.agent_grace_s) == ("127.0.0.1:7470", "127.0.0.1:7471", 300.0)
    assert (s.auth_token, s.max_message_bytes, s.record, s.log_level) == ("", 4 << 20, "", "INFO")


def test_precedence_argument_env_file_default(tmp_path):
    cfg = write(tmp_path, "grpc_listen: 1.1.1.1:1\nhttp_listen: 1.1.1.1:2\nagent_grace_s: 5\n")
    env = {"STEPWATCH_GRPC_LISTEN": "2.2.2.2:1", "STEPWATCH_HTTP_LISTEN": "2.2.2.2:2"}
    s = load_settings({"grpc_listen": "3.3.3.3:1", "http_listen": None, "insecure": True}, environ=env,
                      config_file=cfg)
    assert s.grpc_listen == "3.3.3.3:1"  # argument beats env and file
    assert s.http_listen == "2.2.2.2:2"  # env beats file; None argument means not given
    assert s.agent_grace_s == 5.0  # file beats default
    assert s.record == ""  # default


@pytest.mark.parametrize("listen", ["0.0.0.0:7470", "[::]:7470", "10.0.0.5:7470", "node-a:7470"])
def test_a_non_loopback_ingest_needs_a_credential_or_insecure(listen):
    with pytest.raises(SettingsError, match=r"reachable from other hosts, and no credential is set: set auth_token"):
        load_settings({"grpc_listen": listen}, environ={})
    for extra in ({"auth_token": "t"}, {"insecure": True}):
        assert load_settings({"grpc_listen": listen, **extra}, environ={}).grpc_listen == listen
    for loopback in ("127.0.0.1:7470", "localhost:7470", "[::1]:7470", "127.0.0.2:1"):
        assert load_settings({"grpc_listen": loopback}, environ={}).grpc_listen == loopback


def test_bad_port_names_option_and_source():
    with pytest.raises(SettingsError, match=r"option 'grpc_listen' from argument: invalid value '1.2.3.4:99999'"):
        load_settings({"grpc_listen": "1.2.3.4:99999"}, environ={})
    with pytest.raises(SettingsError, match=r"option 'http_listen' from environment STEPWATCH_HTTP_LISTEN"):
        load_settings(environ={"STEPWATCH_HTTP_LISTEN": "nohost"})


@pytest.mark.parametrize("name,value", [("agent_grace_s", "0"), ("agent_grace_s", "-1"), ("max_message_bytes", "x"),
                                        ("log_level", "LOUD"), ("auth_token", "a b"), ("gc_full_every_s", "-5"),
                                        ("gc_full_every_s", "soon"), ("gil_switch_interval_s", "2"),
                                        ("gil_switch_interval_s", "nan")])
def test_bad_values(name, value):
    with pytest.raises(SettingsError, match=f"option '{name}' from argument: invalid value"):
        load_settings({name: value}, environ={})


def test_unknown_yaml_key_names_file_and_key(tmp_path):
    cfg = write(tmp_path, "grpc_listen: 0.0.0.0:1\ngrcp_listen: x\n")
    with pytest.raises(SettingsError, match=r"collector.yaml: unknown option 'grcp_listen'"):
        load_settings(environ={}, config_file=cfg)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "3\n"])
def test_non_mapping_yaml(tmp_path, text):
    cfg = write(tmp_path, text)
    with pytest.raises(SettingsError, match=r"collector.yaml: expected a mapping of option names"):
        load_settings(environ={}, config_file=cfg)


def test_invalid_yaml_and_missing_file(tmp_path):
    with pytest.raises(SettingsError, match="not valid YAML"):
        load_settings(environ={}, config_file=write(tmp_path, "a: [\n"))
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(environ={}, config_file=str(tmp_path / "missing.yaml"))


def test_empty_file_is_empty_mapping(tmp_path):
    assert load_settings(environ={}, config_file=write(tmp_path, "")).grpc_listen == "127.0.0.1:7470"


def test_bad_file_value_names_source(tmp_path):
    cfg = write(tmp_path, "agent_grace_s: soon\n")
    with pytest.raises(SettingsError, match=r"option 'agent_grace_s' from config file .*collector.yaml: invalid value 'soon'"):
        load_settings(environ={}, config_file=cfg)


def test_the_agents_token_variable_works_for_the_collector_too():
    assert load_settings(environ={"STEPWATCH_TOKEN": "shared"}).auth_token == "shared"
    both = load_settings(environ={"STEPWATCH_TOKEN": "agents", "STEPWATCH_AUTH_TOKEN": "collector"})
    assert both.auth_token == "collector"  # the collector's own name wins


def test_insecure_works_as_the_bare_flag_the_refusal_names():
    """The refusal says "pass --insecure": the flag alone turns it on, a value still works."""
    import argparse

    from stepwatch.collector.tools import collector as cli

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())

    def settings(*argv):
        args = parser.parse_args(["collector", "--grpc-listen", "0.0.0.0:7470", *argv])
        return load_settings({name: getattr(args, name) for _, name, _ in cli._FLAGS}, environ={})

    assert settings("--insecure").insecure is True
    assert settings("--insecure", "true", "--http-listen", "127.0.0.1:0").insecure is True
    with pytest.raises(SettingsError, match="pass --insecure"):
        settings("--insecure", "false")
    with pytest.raises(SettingsError, match="pass --insecure"):
        settings()


@pytest.mark.parametrize("listen", ["0.0.0.0:7471", "[::]:7471", "10.0.0.5:7471"])
def test_a_non_loopback_http_listener_needs_a_token_or_insecure(listen):
    """/metrics, /api and the page show every job, alert and trace: on an address other hosts
    reach they need http_token (or mutual TLS), or the explicit --insecure."""
    base = {"grpc_listen": "127.0.0.1:7470", "http_listen": listen}
    with pytest.raises(SettingsError, match=r"http_listen: .* reachable from other hosts, and no credential is set: "
                                            r"/metrics, /api and the page .* set http_token"):
        load_settings(base, environ={})
    for extra in ({"http_token": "t"}, {"insecure": True}):
        assert load_settings({**base, **extra}, environ={}).http_listen == listen
    assert load_settings(base, environ={"STEPWATCH_HTTP_TOKEN": "t"}).http_listen == listen
    assert load_settings({**base, "http_listen": "127.0.0.1:7471"}, environ={}).http_listen == "127.0.0.1:7471"
