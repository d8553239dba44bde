"""The instance catalog: cloud GPU instance types with their hardware, price, source and date.

The default catalog is ``unstall/cost/data/aws_gpu_instances.csv`` inside the package (AWS EC2
GPU instances of the p2, p3, p3dn, g4dn, g5, p4d and p5 families); users pass their own CSV with
the same columns. Every row is validated; errors name the file, the line and the column.

Columns (``#`` lines are comments, blank lines are skipped):

========================  ========  ==========================================================
column                    required  meaning
========================  ========  ==========================================================
instance                  yes       instance type name, unique in the file
gpus                      yes       GPUs per instance (integer >= 1)
gpu                       yes       a device preset of :mod:`unstall.net.hardware`
gpu_memory_gb             yes       memory of one GPU
gpu_link                  yes       interconnect preset between the GPUs ("none" for one GPU)
network_gbps              yes       the instance's network line rate, Gbit/s
usd_per_hour              yes       on-demand price of one instance
date                      yes       when the figures were read: YYYY, YYYY-MM or YYYY-MM-DD
source                    yes       where the figures come from
network_latency_us        no        one network hop (default 25 us, TCP order of magnitude)
min_billed_s              no        seconds billed at least per instance (default 60: AWS,
                                    Google Cloud and Azure bill on-demand VMs by the second
                                    with a one-minute minimum)
family, region, note      no        free text
========================  ========  ==========================================================
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from dataclasses import MISSING, dataclass, fields
from importlib import resources
from pathlib import Path

from unstall.config import (
    MAX_WHOLE_NUMBER,
    check,
    check_non_negative,
    check_positive,
    read_text_file,
)
from unstall.errors import ConfigError, DataFileError
from unstall.net.hardware import DEVICE_PRESETS, INTERCONNECT_PRESETS

DEFAULT_CATALOG_FILE = "aws_gpu_instances.csv"
NO_LINK = "none"
DEFAULT_NETWORK_LATENCY_US = 25.0
# On-demand VMs are billed by the second with a one-minute minimum (AWS EC2 Linux, Google
# Compute Engine, Azure): a run of seconds still costs each instance a minute.
DEFAULT_MIN_BILLED_S = 60.0
_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


@dataclass(frozen=True, kw_only=True)
class Instance:
    """One instance type: what a configuration of ``count`` of them is built from."""

    instance: str
    gpus: int
    gpu: str
    gpu_memory_gb: float
    gpu_link: str
    network_gbps: float
    usd_per_hour: float
    date: str
    source: str
    network_latency_us: float = DEFAULT_NETWORK_LATENCY_US
    min_billed_s: float = DEFAULT_MIN_BILLED_S
    family: str = ""
    region: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        check(bool(self.instance.strip()), self, "instance", "must not be empty")
        check(
            isinstance(self.gpus, int) and self.gpus >= 1,
            self,
            "gpus",
            f"must be an integer >= 1, got {self.gpus!r}",
        )
        check(
            self.gpu.lower() in DEVICE_PRESETS,
            self,
            "gpu",
            f"unknown GPU {self.gpu!r}; known device presets: {sorted(DEVICE_PRESETS)}",
        )
        for name in (
            "gpu_memory_gb",
            "network_gbps",
            "usd_per_hour",
            "network_latency_us",
            "min_billed_s",
        ):
            value = getattr(self, name)
            check(math.isfinite(value), self, name, f"must be a finite number, got {value!r}")
        check_positive(
            self,
            gpu_memory_gb=self.gpu_memory_gb,
            network_gbps=self.network_gbps,
            usd_per_hour=self.usd_per_hour,
        )
        check_non_negative(
            self, network_latency_us=self.network_latency_us, min_billed_s=self.min_billed_s
        )
        self._check_link()
        check(
            bool(_DATE.match(self.date)),
            self,
            "date",
            f"must be YYYY, YYYY-MM or YYYY-MM-DD, got {self.date!r}",
        )
        check(bool(self.source.strip()), self, "source", "must say where the figures come from")

    def _check_link(self) -> None:
        link = self.gpu_link.lower()
        known = sorted([NO_LINK, *INTERCONNECT_PRESETS])
        check(
            link in INTERCONNECT_PRESETS or link == NO_LINK,
            self,
            "gpu_link",
            f"unknown interconnect {self.gpu_link!r}; known: {known}",
        )
        check(
            (link == NO_LINK) == (self.gpus == 1),
            self,
            "gpu_link",
            f"must be {NO_LINK!r} exactly when the instance has one GPU "
            f"({self.gpus} GPUs, link {self.gpu_link!r})",
        )

    @property
    def device(self) -> str:
        """The device preset key of the GPU (lower case)."""
        return self.gpu.lower()

    @property
    def interconnect(self) -> str:
        """The interconnect preset key, or "" (the device's default) for a one-GPU instance."""
        link = self.gpu_link.lower()
        return "" if link == NO_LINK else link


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """The instance types of one catalog file, in file order, and where they came from."""

    instances: tuple[Instance, ...]
    source: str

    def __post_init__(self) -> None:
        check(bool(self.instances), self, "instances", "must hold at least one instance type")
        names = [i.instance for i in self.instances]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        check(not duplicates, self, "instances", f"duplicate instance types {duplicates}")

    def __iter__(self) -> Iterator[Instance]:
        return iter(self.instances)

    def __len__(self) -> int:
        return len(self.instances)

    def get(self, name: str) -> Instance:
        """The instance type called ``name``."""
        for found in self.instances:
            if found.instance == name:
                return found
        known = [i.instance for i in self.instances]
        raise ConfigError("Catalog", "instance", f"no instance type {name!r}; known: {known}")

    @property
    def devices(self) -> tuple[str, ...]:
        """The device presets of the catalog's GPUs, each once, in file order."""
        return tuple(dict.fromkeys(i.device for i in self.instances))

    @property
    def dates(self) -> tuple[str, ...]:
        """The dates of the figures, each once, sorted."""
        return tuple(sorted({i.date for i in self.instances}))


# --- reading ------------------------------------------------------------------------------------

_COLUMNS = tuple(f.name for f in fields(Instance))
_REQUIRED = tuple(
    f.name for f in fields(Instance) if f.default is MISSING and f.default_factory is MISSING
)
_INT_COLUMNS = ("gpus",)
_FLOAT_COLUMNS = (
    "gpu_memory_gb",
    "network_gbps",
    "usd_per_hour",
    "network_latency_us",
    "min_billed_s",
)


def _data_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every line that is neither blank nor a ``#`` comment."""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            yield number, line


def _header(columns: list[str], source: str, line: int) -> list[str]:
    names = [c.strip() for c in columns]
    unknown = [c for c in names if c not in _COLUMNS]
    if unknown:
        raise DataFileError(
            source, f"unknown column; known: {sorted(_COLUMNS)}", line=line, field=unknown[0]
        )
    missing = [c for c in _REQUIRED if c not in names]
    if missing:
        raise DataFileError(source, "required column is missing", line=line, field=missing[0])
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise DataFileError(source, "column appears twice", line=line, field=repeated[0])
    return names


def _value(column: str, text: str, source: str, line: int) -> object:
    text = text.strip()
    try:
        if column in _INT_COLUMNS:
            whole = int(text)
            if abs(whole) > MAX_WHOLE_NUMBER:
                raise ValueError(text)
            return whole
        if column in _FLOAT_COLUMNS:
            return float(text)
    except ValueError:
        kind = "an integer up to 2**63 - 1" if column in _INT_COLUMNS else "a number"
        shown = text if len(text) <= 40 else f"{text[:37]}..."
        raise DataFileError(
            source, f"must be {kind}, got {shown!r}", line=line, field=column
        ) from None
    return text


def _instance(names: list[str], cells: list[str], source: str, line: int) -> Instance:
    if len(cells) != len(names):
        raise DataFileError(
            source, f"has {len(cells)} cells, the header has {len(names)} columns", line=line
        )
    values = {}
    for name, cell in zip(names, cells, strict=True):
        if not cell.strip() and name not in _REQUIRED:
            continue  # an empty optional cell takes the default
        values[name] = _value(name, cell, source, line)
    try:
        return Instance(**values)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise DataFileError(source, exc.why, line=line, field=exc.field) from exc


def parse_catalog(text: str, *, source: str = "<text>") -> Catalog:
    """Read catalog CSV text; errors name ``source``, the line and the column."""
    lines = list(_data_lines(text))
    if not lines:
        raise DataFileError(source, "no header and no rows")
    # One record a line (no quoted line breaks), so that errors can name the line.
    parsed = [next(csv.reader([line])) for _, line in lines]
    names = _header(parsed[0], source, lines[0][0])
    instances = [
        _instance(names, cells, source, number)
        for (number, _), cells in zip(lines[1:], parsed[1:], strict=True)
    ]
    if not instances:
        raise DataFileError(source, "has a header but no instance rows")
    seen: dict[str, int] = {}
    for (number, _), found in zip(lines[1:], instances, strict=True):
        if found.instance in seen:
            raise DataFileError(
                source,
                f"instance type {found.instance!r} already on line {seen[found.instance]}",
                line=number,
                field="instance",
            )
        seen[found.instance] = number
    return Catalog(instances=tuple(instances), source=source)


def load_catalog(path: str | Path) -> Catalog:
    """The catalog in the CSV file ``path`` (errors name the file, line and column)."""
    p = Path(path)
    return parse_catalog(read_text_file(p), source=str(p))


def default_catalog() -> Catalog:
    """The AWS GPU instance catalog shipped in the package."""
    resource = resources.files("unstall") / "cost" / "data" / DEFAULT_CATALOG_FILE
    return parse_catalog(resource.read_text(encoding="utf-8"), source=DEFAULT_CATALOG_FILE)
