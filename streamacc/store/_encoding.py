"""The data types streamacc stores beyond Zarr v3's core: ``bfloat16``.

Zarr v3's core data types stop at ``float16``; ``bfloat16`` (JAX's and the TPU's own) is the
extension data type ``"bfloat16"`` of zarr-extensions (``data-types/bfloat16``), which
TensorStore and zarrs read and write too: the 16 bits of a float32's sign, exponent and
top 7 bits of its significand, little-endian through the ``bytes`` codec, its fill value
written as for any IEEE float (``"NaN"`` is ``0x7fc0``). zarr-python 3.1 knows no such
type until one is registered with its data-type registry; :func:`register_data_types`
does that, in every process that opens an output through streamacc (importing this module
does it too: a process that unpickles a zarr array of this type has it registered so).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import sys
from typing import Any, ClassVar, Literal, NoReturn, Self, TypeGuard, overload

import ml_dtypes
import numpy as np
from zarr.dtype import DataTypeValidationError, ZDType, data_type_registry

from ._zarrapi import HasEndianness, HasItemSize

__all__ = ["BFloat16", "register_data_types", "storable"]


_DTYPE: np.dtype[np.generic] = np.dtype(ml_dtypes.bfloat16)
_NAME = "bfloat16"
_NAN_BITS = 0x7FC0  # the NaN the extension's "NaN" stands for
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
ZarrFormat = Literal[2, 3]


def _bits(value: np.generic) -> int:
    return int(np.asarray(value, _DTYPE).view(np.uint16))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BFloat16(ZDType[np.dtype[np.generic], np.generic], HasEndianness, HasItemSize):
    """Zarr's ``bfloat16`` extension data type, read and written as ``ml_dtypes.bfloat16`` (numpy's bfloat16).

    Little-endian only: numpy has no big-endian bfloat16, so an array stored big-endian is refused.
    """

    dtype_cls: ClassVar[type[np.dtype[np.generic]]] = type(_DTYPE)
    _zarr_v3_name: ClassVar[Literal["bfloat16"]] = "bfloat16"

    @classmethod
    def from_native_dtype(cls, dtype: np.dtype[np.generic]) -> Self:
        """This type, for numpy's bfloat16; DataTypeValidationError for any other dtype."""
        if isinstance(dtype, np.dtype) and dtype == _DTYPE:
            return cls(endianness=sys.byteorder)
        raise DataTypeValidationError(f"{dtype!r} is not bfloat16")

    def to_native_dtype(self) -> np.dtype[np.generic]:
        """numpy's bfloat16 (ml_dtypes); ValueError for big-endian data, which it cannot hold."""
        if self.endianness != sys.byteorder:
            raise ValueError(
                f"bfloat16 stored {self.endianness}-endian cannot be read: numpy's bfloat16 (ml_dtypes) is "
                f"{sys.byteorder}-endian only"
            )
        return _DTYPE

    @classmethod
    def _from_json_v2(cls, data: object) -> Self:
        raise DataTypeValidationError(f"bfloat16 is a Zarr v3 data type; {data!r} is Zarr v2's")

    @classmethod
    def _from_json_v3(cls, data: object) -> Self:
        if data == _NAME or data in ({"name": _NAME}, {"name": _NAME, "configuration": {}}):
            return cls()
        raise DataTypeValidationError(f"{data!r} is not the data type {_NAME!r}")

    @overload
    def to_json(self, zarr_format: Literal[2]) -> NoReturn: ...

    @overload
    def to_json(self, zarr_format: Literal[3]) -> str: ...

    def to_json(self, zarr_format: ZarrFormat) -> str:
        """``"bfloat16"``; Zarr v2 has no such type (ValueError)."""
        if zarr_format == 3:
            return _NAME
        raise ValueError("bfloat16 is a Zarr v3 extension data type; Zarr v2 cannot store it")

    def _check_scalar(self, data: object) -> TypeGuard[float | str | np.generic]:
        if isinstance(data, str):
            try:
                float(data)
            except ValueError:
                return False
            return True
        return isinstance(data, numbers.Real | np.generic) and not isinstance(data, bool | np.bool_)

    def cast_scalar(self, data: object) -> np.generic:
        """``data`` (a real number, or its text) as a bfloat16 scalar, rounded to nearest even."""
        if not self._check_scalar(data):
            raise TypeError(f"{data!r} of type {type(data).__name__} cannot be a bfloat16 scalar")
        if isinstance(data, np.generic) and data.dtype == _DTYPE:
            return data  # as it is: a NaN keeps its bits
        value: np.generic = _DTYPE.type(float(data))
        return value

    def default_scalar(self) -> np.generic:
        """0.0 as bfloat16."""
        return self.cast_scalar(0.0)

    def from_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> np.generic:
        """A fill value as the extension writes it: a number, ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, or
        ``"0x"`` and four hex digits of its bits."""
        if isinstance(data, str) and data.startswith("0x") and len(data) == 6:
            try:
                bits = int(data[2:], 16)
            except ValueError:
                raise TypeError(f"{data!r} is no bfloat16 value") from None
            value: np.generic = np.frombuffer(bits.to_bytes(2, "little"), _DTYPE)[0]
            return value
        if isinstance(data, str) and data in _SPECIAL:
            return self.cast_scalar(_SPECIAL[data])
        if isinstance(data, int | float) and not isinstance(data, bool):
            return self.cast_scalar(data)
        raise TypeError(f"{data!r} is no bfloat16 value")

    def to_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> float | str:
        """``data`` as a fill value: a number, ``"NaN"`` (``"0x...."`` for any other NaN), or an infinity's name."""
        value = self.cast_scalar(data)
        number = float(value)
        if math.isnan(number):
            bits = _bits(value)
            return "NaN" if bits == _NAN_BITS else f"0x{bits:04x}"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        return number

    @property
    def item_size(self) -> int:
        """2 bytes."""
        return 2


def register_data_types() -> None:
    """Teach zarr-python the data types streamacc stores beyond Zarr v3's core: ``bfloat16``.

    An output holding ``bfloat16`` arrays (the TPU's own type, ``jnp.bfloat16``) stores them
    as the Zarr community's ``bfloat16`` extension data type, which TensorStore and zarrs
    read too. zarr-python 3.1 reads and writes it once it is registered in the process:
    streamacc does so whenever it opens an output, and a program that reads outputs with
    zarr or xarray alone calls this first; it reads them as numpy's ``bfloat16`` (ml_dtypes),
    bit for bit. Calling it again does nothing, and a ``bfloat16`` type zarr already
    knows is kept.

    Returns
    -------
    None
        zarr-python's data-type registry holds ``bfloat16`` from now on, in this process.

    Examples
    --------
    >>> import jax.numpy as jnp, numpy as np, streamacc, zarr
    >>> def step(x, _):
    ...     x = x * jnp.bfloat16(1.5)
    ...     return x, x
    >>> _ = streamacc.write("bf16.zarr", step, jnp.bfloat16(1.0), length=4, names="x", progress=False)
    >>> streamacc.register_data_types()
    >>> x = zarr.open_array("bf16.zarr/x", mode="r")
    >>> x.dtype, x[:].tolist()
    (dtype(bfloat16), [1.5, 2.25, 3.375, 5.0625])
    """
    if _NAME not in data_type_registry.contents:
        data_type_registry.register(_NAME, BFloat16)


def storable(dtype: np.dtype[Any]) -> bool:
    """Whether zarr stores arrays of ``dtype`` (with :func:`register_data_types`' types)."""
    register_data_types()
    try:
        data_type_registry.match_dtype(np.dtype(dtype))
    except ValueError:
        return False
    return True


register_data_types()  # also where a worker unpickles an array of this type: importing the class registers it
