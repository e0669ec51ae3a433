"""What a blocked scan will do: its settings, how its length is cut into blocks, its checks and its plan.

``_blocking`` holds a scan's settings (``Blocking``: its length, blocks, unroll, direction
and thinning, with their checks and arithmetic, no JAX), ``_layout`` cuts a length into
blocks (pure arithmetic), ``_checks`` validates arguments, ``_until`` a scan's condition
(``Until``) and its checks, ``_unroll`` chooses the unroll of a step that names none,
``_platform`` says where JAX computes (the ``engine.platform`` seam), ``_plan``
validates and plans a blocked scan, ``_spec`` is a scan's description (``ScanSpec``) made
into a plan.

These are the names the engine and its other room use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ...base import (
        BLOCK_KEYWORDS as BLOCK_KEYWORDS,
        MAX_LENGTH as MAX_LENGTH,
        SCAN_DEFAULTS as SCAN_DEFAULTS,
        Blocking as Blocking,
        BlockKeywords as BlockKeywords,
        ScanKeywords as ScanKeywords,
        block_bounds as block_bounds,
        block_count as block_count,
        block_size_near as block_size_near,
        block_steps as block_steps,
        check_length as check_length,
        committed_span as committed_span,
        pool_size as pool_size,
        row_step as row_step,
        rows_in as rows_in,
        unrolled as unrolled,
    )
    from ._checks import Carry as Carry, Step as Step, x64_scope as x64_scope
    from ._plan import Plan as Plan, make_plan as make_plan, resize as resize
    from ._platform import compute_platform as compute_platform
    from ._spec import (
        ScanSpec as ScanSpec,
        as_spec as as_spec,
        same_carry as same_carry,
        step_of as step_of,
        until_of as until_of,
    )
    from ._unroll import StepProgram as StepProgram, choose_unroll as choose_unroll, step_program as step_program
    from ._until import Predicate as Predicate, Until as Until

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
