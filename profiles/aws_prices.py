"""The price table of the data plane's AWS requests (``profiles/aws_prices.json``, beside the hardware
catalog): per service, the USD price of the units the components count (core/adapters/usage.py),
with the region, the date the prices stood at (``as_of``) and where they came from. Read by
``skinflint report`` for its data-plane table (docs/report.md).

A malformed file is one :class:`~profiles.errors.StoreError` line naming the file and the first
problem, never a traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from profiles.errors import StoreError

__all__ = ["AWS_PRICES_PATH", "AwsPrices", "UnitPrice", "load_aws_prices"]

AWS_PRICES_PATH = Path(__file__).with_name("aws_prices.json")
_AS_OF = re.compile(r"\d{4}-\d{2}(-\d{2})?")
_OF = re.compile(r"[a-z0-9-]+\.[A-Za-z0-9]+")


class UnitPrice(BaseModel):
    """``usd`` per ``per`` units (0.625 per 1,000,000 write request units)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd: float = Field(ge=0)
    per: float = Field(gt=0)
    what: str = ""
    #: ``service.Unit``: billed per unit of another counted unit (WAF: per API Gateway request)
    of: str | None = None
    #: this entry's own date and source, where they differ from the table's (``as_of``, ``source``)
    as_of: str | None = None
    source: str | None = None

    @field_validator("of")
    @classmethod
    def _of_names_a_unit(cls, value: str | None) -> str | None:
        if value is not None and not _OF.fullmatch(value):
            raise ValueError(f"'of' must name a counted unit as service.Unit, got {value!r}")
        return value

    def cost(self, units: float) -> float:
        """USD of ``units`` units."""
        return units * self.usd / self.per


class AwsPrices(BaseModel):
    """The price table: ``services[service][unit]`` (service as its endpoint prefix: ``dynamodb``,
    ``sqs``, ``monitoring``, ``s3``, ``apigateway``, ``lambda``, ``wafv2``)."""

    model_config = ConfigDict(extra="allow", frozen=True)  # "_about" rides along

    region: str = Field(min_length=1)
    as_of: str
    currency: Literal["USD"]
    source: str = Field(min_length=1)
    services: dict[str, dict[str, UnitPrice]]

    @field_validator("as_of")
    @classmethod
    def _as_of_is_a_date(cls, value: str) -> str:
        if not _AS_OF.fullmatch(value):
            raise ValueError(f"as_of must be a date, YYYY-MM or YYYY-MM-DD, got {value!r}")
        return value

    def price(self, service: str, unit: str) -> UnitPrice | None:
        return self.services.get(service, {}).get(unit)

    def require(self, service: str, unit: str) -> UnitPrice:
        """The price of ``service.unit``; a :class:`StoreError` naming it when the table lacks it."""
        found = self.price(service, unit)
        if found is None:
            raise StoreError(f"the AWS price table has no price for {service}.{unit}", f"{service}.{unit}")
        return found

    def provenance(self, service: str, unit: str) -> dict[str, str]:
        """``{"as_of": ..., "source": ...}`` of one price: its own, else the table's."""
        found = self.require(service, unit)
        return {"as_of": found.as_of or self.as_of, "source": found.source or self.source}

    def derived(self) -> list[tuple[str, str, str, str]]:
        """(service, unit, of service, of unit) of every price billed per another counted unit."""
        out: list[tuple[str, str, str, str]] = []
        for service, units in self.services.items():
            for unit, price in units.items():
                if price.of is not None:
                    of_service, of_unit = price.of.split(".", 1)
                    out.append((service, unit, of_service, of_unit))
        return out

    @property
    def label(self) -> str:
        """``us-east-1 list prices as of 2025-01``."""
        return f"{self.region} list prices as of {self.as_of}"


def load_aws_prices(path: str | Path | None = None) -> AwsPrices:
    """The price table at ``path`` (default: the packaged ``aws_prices.json``). Raises
    :class:`StoreError` with one line naming the file and the problem."""
    source = Path(path) if path is not None else AWS_PRICES_PATH
    try:
        doc = json.loads(source.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{source}: cannot read the AWS price table ({exc})", str(source)) from exc
    try:
        return AwsPrices.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        raise StoreError(
            f"{source}: malformed AWS price table: {where}: {first['msg']} ({exc.error_count()} problem(s))",
            str(source),
        ) from exc
