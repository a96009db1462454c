"""The front under uvicorn (local stack): ``uvicorn functions.front.local:app``."""

from __future__ import annotations

from functions.front.app import create_app
from functions.front.wiring import service_from_config

# warmed at startup: the first frame does not pay for the clients, routers and connections
app = create_app(service_from_config, warm=True)
