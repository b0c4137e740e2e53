"""The HTTP side: the server and its threaded routes (``_http_server``), the JSON API
(``_json_routes``: /api/jobs, /api/steps; ``_window_routes``: windows and traces) and the live
page (``_page``)."""
