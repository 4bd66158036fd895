"""Run-time numerics checks: the status arrays that a kernel's ``CheckNumerics`` nodes reduce.

A ``CheckNumerics`` node (:mod:`polytf.ops.float_checks`) lowers to statements that reduce
a bool status of :data:`STATUS_SHAPE` in a kernel temporary: ``STATUS[STATUS_NAN]`` is
true when some element of its tensor is NaN, ``STATUS[STATUS_INFINITY]`` when some
element is ±inf. Its :class:`~polytf.poly.expression.FloatTest` expressions carry the node
and its message; :func:`run_time_numerics_checks` finds them in a Scop, so that the
runtime reads each status after the kernel ran (:mod:`polytf.runtime.numerics_checks`),
as :func:`polytf.poly.access_bounds.run_time_index_checks` names the indices it checks
before a kernel runs.
"""

from __future__ import annotations

from polytf.poly.expression import FloatTest, subexpressions
from polytf.poly.scop import Scop

#: Shape of a status array, and the position of each flag in it.
STATUS_SHAPE = (2,)
STATUS_NAN = 0
STATUS_INFINITY = 1


def run_time_numerics_checks(scop: Scop) -> tuple[tuple[str, str, str], ...]:
    """``(status array, node, message)`` of every ``CheckNumerics`` node of ``scop``, once
    each, in program order: the runtime reads those arrays after the kernel ran."""
    checks = (
        (statement.write.array, expr.node, expr.message)
        for statement in scop.statements
        for expr in subexpressions(statement.value)
        if isinstance(expr, FloatTest) and expr.node
    )
    return tuple(dict.fromkeys(checks))


__all__ = ["STATUS_INFINITY", "STATUS_NAN", "STATUS_SHAPE", "run_time_numerics_checks"]
