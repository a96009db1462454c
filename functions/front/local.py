"""The front under uvicorn (local stack): ``uvicorn functions.front.local:app``."""

from __future__ import annotations

from functions.front.app import create_app
from functions.front.wiring import service_from_config

app = create_app(service_from_config)
