"""A brute-force legality check, independent of isl's dependence analysis: enumerate
every statement instance of a tiny Scop, derive its dependences by replaying its memory
accesses in program order, walk the loop AST of a schedule the way the code generator
runs it (loops below a parallel mark distributed over threads) and check that every
dependence is respected.

Only for tiny domains (a few thousand instances): it is quadratic in the accesses to
one element.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import islpy as isl

from polytf.poly.affine import AffineExpr, FloorDiv, Modulo
from polytf.poly.scop import Scop
from polytf.targets.llvm_codegen import parallel_pieces

Instance = tuple[str, tuple[int, ...]]


def _index(expression, point: dict[str, int]) -> int:
    if isinstance(expression, AffineExpr):
        return expression.constant + sum(c * point[name] for name, c in expression.terms)
    if isinstance(expression, FloorDiv):
        return _index(expression.numerator, point) // expression.divisor
    if isinstance(expression, Modulo):
        return _index(expression.numerator, point) % expression.divisor
    raise TypeError(expression)


def program_order(scop: Scop) -> list[Instance]:
    """Every instance, in the order the unscheduled program runs them."""
    result = []
    for statement in scop.statements:
        domain = statement.domain()
        for point in itertools.product(*(range(e) for e in statement.extents)):
            text = f"{{ {statement.name}[{', '.join(map(str, point))}] }}"
            if isl.Set(text).is_subset(domain):
                result.append((statement.name, point))
    return result


def dependences(scop: Scop) -> set[tuple[Instance, Instance]]:
    """``(source, sink)`` pairs touching one element, at least one a write, source first
    in program order (flow, anti and output dependences)."""
    statements = {s.name: s for s in scop.statements}
    history: dict[tuple[str, int], list[tuple[Instance, bool]]] = {}
    result = set()
    for instance in program_order(scop):
        statement = statements[instance[0]]
        point = dict(zip(statement.iterators, instance[1]))
        accesses = [(a, False) for a in statement.reads] + [(statement.write, True)]
        for access, is_write in accesses:
            cell = (access.array, tuple(_index(i, point) for i in access.index))
            for earlier, earlier_write in history.get(cell, ()):
                if (is_write or earlier_write) and earlier != instance:
                    result.add((earlier, instance))
            history.setdefault(cell, []).append((instance, is_write))
    return result


def _evaluate(expression: isl.AstExpr, env: dict[str, int]) -> int:
    kind = expression.get_type()
    if kind == isl.ast_expr_type.int:
        return expression.int_get_val().to_python()
    if kind == isl.ast_expr_type.id:
        return env[expression.id_get_id().get_name()]
    T = isl.ast_expr_op_type
    op = expression.op_get_type()
    values = [_evaluate(expression.op_get_arg(i), env) for i in range(expression.op_get_n_arg())]
    table = {
        T.add: lambda a, b: a + b,
        T.sub: lambda a, b: a - b,
        T.mul: lambda a, b: a * b,
        T.minus: lambda a: -a,
        T.fdiv_q: lambda a, b: a // b,
        T.pdiv_q: lambda a, b: a // b,
        T.div: lambda a, b: a // b,
        T.pdiv_r: lambda a, b: a % b,
        T.zdiv_r: lambda a, b: a % b,
        T.max: max,
        T.min: min,
        T.eq: lambda a, b: int(a == b),
        T.le: lambda a, b: int(a <= b),
        T.lt: lambda a, b: int(a < b),
        T.ge: lambda a, b: int(a >= b),
        T.gt: lambda a, b: int(a > b),
        T.and_: lambda a, b: int(a and b),
        T.and_then: lambda a, b: int(a and b),
        T.or_: lambda a, b: int(a or b),
        T.or_else: lambda a, b: int(a or b),
        T.select: lambda c, a, b: a if c else b,
        T.cond: lambda c, a, b: a if c else b,
    }
    return table[op](*values)


@dataclass
class Execution:
    """The instances in AST order, and for each the parallel loop iteration it ran in:
    ``(index of the distributed step, iteration value)`` or None when it ran on thread 0."""

    order: list[Instance]
    parallel_iteration: dict[Instance, tuple[int, int] | None]


def execute(ast: isl.AstNode) -> Execution:
    """Walk the AST as the generated code runs it: the steps of
    :func:`polytf.targets.llvm_codegen.parallel_pieces` in turn (a barrier between them),
    the iterations of a distributed step possibly at once."""
    execution = Execution([], {})

    def walk(node: isl.AstNode, env: dict[str, int], parallel: tuple[int, int] | None) -> None:
        kind = node.get_type()
        if kind == isl.ast_node_type.for_:
            name = node.for_get_iterator().get_id().get_name()
            value = _evaluate(node.for_get_init(), env)
            while _evaluate(node.for_get_cond(), {**env, name: value}):
                walk(node.for_get_body(), {**env, name: value}, parallel)
                value += _evaluate(node.for_get_inc(), {**env, name: value})
        elif kind == isl.ast_node_type.block:
            children = node.block_get_children()
            for i in range(children.n_ast_node()):
                walk(children.get_at(i), env, parallel)
        elif kind == isl.ast_node_type.if_:
            if _evaluate(node.if_get_cond(), env):
                walk(node.if_get_then_node(), env, parallel)
            elif node.if_has_else_node():
                walk(node.if_get_else_node(), env, parallel)
        elif kind == isl.ast_node_type.mark:
            walk(node.mark_get_node(), env, parallel)
        elif kind == isl.ast_node_type.user:
            call = node.user_get_expr()
            name = call.op_get_arg(0).id_get_id().get_name()
            point = tuple(_evaluate(call.op_get_arg(i + 1), env) for i in range(call.op_get_n_arg() - 1))
            execution.order.append((name, point))
            execution.parallel_iteration[(name, point)] = parallel
        else:
            raise TypeError(kind)

    for index, piece in enumerate(parallel_pieces(ast)):
        if not piece.distributed:
            walk(piece.node, {}, None)
            continue
        loop = piece.node
        name = loop.for_get_iterator().get_id().get_name()
        value = _evaluate(loop.for_get_init(), {})
        while _evaluate(loop.for_get_cond(), {name: value}):
            walk(loop.for_get_body(), {name: value}, (index, value))
            value += _evaluate(loop.for_get_inc(), {name: value})
    return execution


def violations(scop: Scop, ast: isl.AstNode) -> list[str]:
    """Dependences of ``scop`` that running ``ast`` breaks: a sink before its source, or a
    source and sink in different iterations of one parallel loop (which may run at once)."""
    execution = execute(ast)
    position = {instance: i for i, instance in enumerate(execution.order)}
    expected = program_order(scop)
    if sorted(position) != sorted(expected) or len(position) != len(execution.order):
        return ["the AST does not run every instance exactly once"]
    problems = []
    for source, sink in dependences(scop):
        if position[source] > position[sink]:
            problems.append(f"{sink} runs before {source}")
        a, b = execution.parallel_iteration[source], execution.parallel_iteration[sink]
        if a is not None and b is not None and a[0] == b[0] and a[1] != b[1]:
            problems.append(f"{source} and {sink} run in different iterations of parallel loop {a[0]}")
    return problems
