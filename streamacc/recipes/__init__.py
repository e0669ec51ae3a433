"""Named, parameterised step functions for the CLI, in the style of optax.

Each :class:`Recipe` has a ``build(size, dtype, **params) -> Job`` that validates its
arguments (raising :class:`~streamacc.InputError` with one line that names the argument
as the caller spells it) and returns a :class:`Job`: a step function hashable by value,
its initial carry, its inputs, its length and output names, the recommended unroll, and
JSON metadata::

    job = get_recipe("gp").build(10**9, "float64", ratio=1 + 1e-8)
    for block in streamacc.iter_blocks(job.f, job.init, job.xs, length=job.length, unroll=job.unroll):
        ...

Importing the recipes loads neither numpy nor JAX (a step imports them as it is built or
run), so their names, parameters and descriptions cost the command line nothing.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._base import (
        DEGENERATE_RULE as DEGENERATE_RULE,
        Job as Job,
        Param as Param,
        Recipe as Recipe,
        check_dtype as check_dtype,
        option as option,
        refusal as refusal,
    )
    from ._compensated import (
        fast_two_sum as fast_two_sum,
        split as split,
        split_constant as split_constant,
        two_prod as two_prod,
        two_sum as two_sum,
    )
    from ._input import InputRows as InputRows, zstd_margin as zstd_margin
    from ._registry import RECIPES as RECIPES, get_recipe as get_recipe
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
