"""What a DirectML device can take: a feature level, the types it reported, and the fallback policy."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from dmlbridge.errors import DmlBridgeError, InvalidArgumentError
from dmlbridge.types.data_types import DmlDataType, FeatureLevel

__all__ = ["Int64Mode", "Target"]

Int64Mode = Literal["emulate", "narrow", "saturate"]


@dataclass(frozen=True, eq=False)
class Target:
    """A DirectML target: which data types exist and how to treat the cases with no exact fallback.

    Args:
        feature_level: the device's DirectML feature level; it decides which types exist and how many
            dimensions a tensor may have.
        supported: the types the device reported through ``CheckFeatureSupport`` (names or DmlDataType), or
            None for every type the feature level defines. Types the level does not define are ignored.
        int64: what to do with INT64/UINT64 when the target lacks them: ``"emulate"`` keeps 8-byte elements
            described as INT32/UINT32 with doubled strides (ONNX Runtime's later scheme, its
            ``Remap64bitDmlDataTypeTo32bit``; its first emulation described both as UINT32); ``"narrow"`` writes
            4-byte values (every value must fit 32 bits); ``"saturate"`` (only with ``allow_lossy``) writes 4-byte
            values clamped to the 32-bit range, for the INT64_MAX sentinels of Slice and Gather, and each entry
            counts the values it clamped.
        allow_lossy: allow DOUBLE to become FLOAT32 when the target lacks FLOAT64 (and int64="saturate").

    Example:
        >>> import dmlbridge
        >>> target = dmlbridge.Target("6.2", supported={"FLOAT32", "INT8"})
        >>> target.describe()
        {'feature_level': '6.2', 'supported': ['FLOAT32', 'INT8'], 'int64': 'emulate', 'allow_lossy': False}
        >>> dmlbridge.dml_type_for("INT4", target).name
        'INT8'
    """

    feature_level: FeatureLevel = FeatureLevel.FL_6_4
    supported: frozenset[DmlDataType] | None = None
    int64: Int64Mode = "emulate"
    allow_lossy: bool = False
    #: The types this target can use: the level's types intersected with ``supported``.
    types: frozenset[DmlDataType] = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        feature_level: FeatureLevel | str | int | float = FeatureLevel.FL_6_4,
        supported: Iterable[DmlDataType | str | int] | None = None,
        int64: Int64Mode = "emulate",
        allow_lossy: bool = False,
    ) -> None:
        level = FeatureLevel.parse(feature_level)
        if isinstance(supported, (str, bytes)):
            raise InvalidArgumentError(
                f"supported must be a collection of DirectML types, not the string {supported!r}; "
                "write supported={'FLOAT32', 'INT8'} or pass DmlDataType members"
            )
        chosen = None if supported is None else frozenset(DmlDataType.parse(t) for t in supported)
        if int64 not in ("emulate", "narrow", "saturate"):
            raise InvalidArgumentError(f"int64 must be 'emulate', 'narrow' or 'saturate', not {int64!r}")
        if not isinstance(allow_lossy, bool):
            raise InvalidArgumentError(f"allow_lossy must be True or False, not {allow_lossy!r}")
        if int64 == "saturate" and not allow_lossy:
            raise InvalidArgumentError(
                "int64='saturate' changes the values that do not fit 32 bits (INT64_MAX becomes INT32_MAX); "
                "pass allow_lossy=True with it"
            )
        level_types = frozenset(t for t in DmlDataType if t is not DmlDataType.UNKNOWN and t.introduced_in <= level)
        object.__setattr__(self, "feature_level", level)
        object.__setattr__(self, "supported", chosen)
        object.__setattr__(self, "int64", int64)
        object.__setattr__(self, "allow_lossy", allow_lossy)
        object.__setattr__(self, "types", level_types if chosen is None else level_types & chosen)

    def __eq__(self, other: object) -> bool:
        """Targets are equal when they are one feature level and take the same types the same way
        (``Target("6.4")`` and ``Target("6.4", supported=<every 6.4 type>)`` are one target; ``Target("1.0")`` and
        ``Target("2.0")`` are not, even where their types agree: BOOL and dimension counts differ)."""
        if not isinstance(other, Target):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def _identity(self) -> tuple[object, ...]:
        return (self.feature_level, self.types, self.int64, self.allow_lossy)

    @property
    def max_dimension_count(self) -> int:
        """The most dimensions a buffer tensor may have on this target."""
        return self.feature_level.max_dimension_count

    @property
    def min_dimension_count(self) -> int:
        """The fewest dimensions a buffer tensor may have on this target: 4 below feature level 3.0 (DirectML 1.0:
        "all buffer tensors must have a DimensionCount of either 4 or 5"), 1 from it."""
        return self.feature_level.min_dimension_count

    def check_min_dims(self, min_dims: Any, error: type[DmlBridgeError] = InvalidArgumentError) -> int:
        """``min_dims`` checked for this target: None is the target's fewest dimensions; otherwise a whole number
        (numpy integers too) from that fewest (0 from feature level 3.0) to the most. A value below the fewest is
        an InvalidArgumentError, any other bad value an ``error`` (``prepare`` has always called those a
        LayoutError); both name the ``min_dims`` keyword.

        Example:
            >>> Target("2.0").check_min_dims(None), Target().check_min_dims(1)
            (4, 1)
        """
        least, most = self.min_dimension_count, self.max_dimension_count
        if min_dims is None:
            return least
        if isinstance(min_dims, bool) or not isinstance(min_dims, (int, np.integer)) or not 0 <= min_dims <= most:
            raise error(
                f"min_dims must be a whole number from {least if least > 1 else 0} to {most} (the most dimensions "
                f"feature level {self.feature_level.dotted} allows), got {min_dims!r}"
            )
        if min_dims < least:
            raise InvalidArgumentError(
                f"min_dims={int(min_dims)} is below the {least} dimensions every buffer tensor has at feature level "
                f"{self.feature_level.dotted} (below 3.0 DirectML takes 4 or 5); leave min_dims out (None: {least}) "
                f"or pass {least} or 5"
            )
        return int(min_dims)

    def supports(self, dml_type: DmlDataType) -> bool:
        """True when the target can use ``dml_type``."""
        return dml_type in self.types

    def describe(self) -> dict[str, object]:
        """A JSON-friendly description (used in manifests and the CLI)."""
        return {
            "feature_level": self.feature_level.dotted,
            "supported": sorted(t.name for t in self.types),
            "int64": self.int64,
            "allow_lossy": self.allow_lossy,
        }
