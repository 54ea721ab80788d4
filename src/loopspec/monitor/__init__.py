"""The oracle live: ``loopspec monitor`` is an OpenTelemetry (OTLP/HTTP) endpoint that judges every agent run
as its trace closes, with the verdicts ``loopspec check`` gives on the same spans from a file.

``_otlp`` decodes export requests (protobuf or JSON, gzip) and cuts them by trace; ``_runs`` holds the open
traces with bounded memory and decides when one closes; ``_service`` is the server, the judge, the ticker
and the forwarder. See docs/monitor.md.

Layer: a front end over the oracle, below ``cli``; it may import ``oracle`` and the layers below it
(``spec``, ``support``), and nothing imports it but the command line.
"""

from ._service import DEFAULT_PORT, Monitor, Settings

__all__ = ["DEFAULT_PORT", "Monitor", "Settings"]
