"""The HTTP side: the server and its threaded routes (``_http_server``), the JSON API
(``_json_routes``: /api/jobs, /api/steps; ``_window_routes``: windows and traces) and the live
page (``_page``), the collector's routes (``_routes``) and TLS (``_tls``)."""

from ._http_server import FileBody, HttpServer, accepts
from ._json_routes import SharedRender, jobs_json, jobs_summary_json, runs_json, steps_json
from ._page import page
from ._routes import Routes
from ._tls import ssl_context, tls_files
from ._window_routes import traces_json, windows_json

__all__ = ["FileBody", "HttpServer", "Routes", "SharedRender", "accepts", "ssl_context", "tls_files", "jobs_json", "jobs_summary_json", "page", "runs_json",
           "steps_json", "traces_json", "windows_json"]
