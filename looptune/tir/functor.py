"""Generic traversal and rewriting of IR trees: visit, transform, substitute, and walks over
statements only (stmt_children, find_stmts, map_children).

Every node is a frozen dataclass, so one generic walker over its fields serves all node
kinds; `transform` rebuilds a node only when one of its children changed. Passes that
care about a few statement kinds handle those and leave the others to `map_children`
(rewriting) or `stmt_children` (reading), so no pass spells out every kind.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Callable

from .buffer import Buffer
from .expr import (Binary, BufferLoad, Cast, IntImm, FloatImm, PrimExpr, Select, Var, binary,
                   cast as make_cast, select)
from .stmt import (Allocate, Block, BlockRealize, BufferRegion, For, IfThenElse, IterVar,
                   SeqStmt, Stmt, seq)

_FIELDS: dict[type, tuple[str, ...]] = {}
_CHILD_FIELDS: dict[type, tuple] = {}
_LEAVES = (Var, IntImm, FloatImm, Buffer, str, int, float, bool, type(None))
# fields declared with these types never hold a child node: walks skip them
_DATA_TYPES = {"str", "int", "float", "bool", "Buffer", "str | None"}


def node_fields(cls) -> tuple[str, ...]:
    f = _FIELDS.get(cls)
    if f is None:
        f = _FIELDS[cls] = tuple(x.name for x in fields(cls))
    return f


def child_fields(cls) -> tuple:
    """(position, name) of the fields of `cls` that may hold child nodes."""
    f = _CHILD_FIELDS.get(cls)
    if f is None:
        f = _CHILD_FIELDS[cls] = tuple((i, x.name) for i, x in enumerate(fields(cls))
                                       if x.type not in _DATA_TYPES)
    return f


def children(node) -> list:
    """The direct child nodes (expressions, statements, regions, iter vars) of `node`."""
    out = []
    for _, name in child_fields(type(node)):
        v = getattr(node, name)
        if type(v) is tuple:
            for x in v:
                if type(x) is tuple:
                    out.extend(y for y in x if _is_node(y))
                elif _is_node(x):
                    out.append(x)
        elif _is_node(v):
            out.append(v)
    return out


_NODE_TYPES: dict = {}


def _is_node(x) -> bool:
    t = type(x)
    r = _NODE_TYPES.get(t)
    if r is None:
        r = _NODE_TYPES[t] = issubclass(t, (PrimExpr, Stmt, BufferRegion, IterVar))
    return r


def visit(node, fn: Callable) -> None:
    """Call fn(n) on every node in pre-order; where fn returns False (not just a falsy
    value), the children of that node are skipped."""
    stack = [node]
    while stack:
        n = stack.pop()
        if fn(n) is False:
            continue
        kids = children(n)
        if kids:
            kids.reverse()
            stack.extend(kids)


# ------------------------------------------------------------------------------ statements
def _body(s):
    return (s.body,)


def _branches(s):
    return (s.then_case,) if s.else_case is None else (s.then_case, s.else_case)


_STMT_CHILDREN: dict = {
    For: _body, Allocate: _body, Block: _body,
    SeqStmt: lambda s: s.stmts,
    IfThenElse: _branches,
    BlockRealize: lambda s: (s.block.body,),
}


def _no_children(s):
    return ()


def _stmt_children_fn(t):
    for cls, f in tuple(_STMT_CHILDREN.items()):
        if issubclass(t, cls):
            break
    else:
        f = _no_children
    _STMT_CHILDREN[t] = f
    return f


def stmt_children(s) -> tuple:
    """The statements directly inside `s`, in order: the body of a loop, an allocation or a
    block (a BlockRealize's is its block's body: the Block node itself is not a step of the
    walk), the items of a sequence, the branches of a condition. A block's `init` is not
    among them. () for a statement without any (store, comment, evaluate)."""
    f = _STMT_CHILDREN.get(type(s))
    if f is None:
        f = _stmt_children_fn(type(s))
    return f(s)


# find_stmts and find_stmts_with_parents follow the structure of stmt_children inline, and
# follow a chain of single bodies without the stack: the schedule indexes the whole tree
# after every primitive, and a call (or an isinstance) per node would double the cost.
_MATCHES: dict = {}


def _matches(types) -> tuple:
    """Which of For, BlockRealize, SeqStmt, IfThenElse, Allocate, Block are `types`."""
    m = _MATCHES.get(types)
    if m is None:
        m = _MATCHES[types] = tuple(issubclass(k, types) for k in
                                    (For, BlockRealize, SeqStmt, IfThenElse, Allocate, Block))
    return m


def find_stmts(node, types, *, stop=()) -> list:
    """The statements of `node` (itself included) that are instances of `types`, in
    pre-order: a statement before those inside it, the subtrees of its stmt_children in
    order. Statements that are instances of `stop` are not looked inside (`types` and
    `stop` are a type or a tuple of types). find_stmts(s, Stmt) lists them all."""
    m_for, m_br, m_seq, m_if, m_alloc, m_block = _MATCHES.get(types) or _matches(types)
    s_for, s_br, s_seq, s_if, s_alloc, s_block = _MATCHES.get(stop) or _matches(stop)
    out = []
    stack = [node]
    pop, push, append = stack.pop, stack.append, out.append
    while stack:
        s = pop()
        while True:
            t = type(s)
            if t is For:
                if m_for:
                    append(s)
                if s_for:
                    break
                s = s.body
            elif t is BlockRealize:
                if m_br:
                    append(s)
                if s_br:
                    break
                s = s.block.body
            elif t is SeqStmt:
                if m_seq:
                    append(s)
                if not s_seq:
                    stack.extend(reversed(s.stmts))
                break
            elif t is IfThenElse:
                if m_if:
                    append(s)
                if s_if:
                    break
                if s.else_case is not None:
                    push(s.else_case)
                s = s.then_case
            elif t is Allocate or t is Block:
                if m_alloc if t is Allocate else m_block:
                    append(s)
                if s_alloc if t is Allocate else s_block:
                    break
                s = s.body
            else:  # a leaf (store, comment, ...), or a subclass of a kind above
                if isinstance(s, types):
                    append(s)
                if _STMT_CHILDREN.get(t) is not _no_children and not (stop and isinstance(s, stop)):
                    stack.extend(reversed(stmt_children(s)))
                break
    return out


def collect_realizes(node) -> list:
    """The BlockRealize nodes in `node` (itself included), in pre-order, not looking inside
    those found: the blocks of one scope."""
    return find_stmts(node, BlockRealize, stop=BlockRealize)


def find_stmts_with_parents(node, types) -> list:
    """(statement, parents) for the statements of `node` that are instances of `types`, in
    the order of find_stmts; parents are the statements enclosing it from `node` down,
    outermost first, where a BlockRealize encloses its body as two: itself, then its Block."""
    m_for, m_br, m_seq, m_if, m_alloc, m_block = _MATCHES.get(types) or _matches(types)
    out = []
    stack = [(node, ())]
    pop, push, append = stack.pop, stack.append, out.append
    while stack:
        s, parents = pop()
        while True:
            t = type(s)
            if t is For:
                if m_for:
                    append((s, parents))
                parents += (s,)
                s = s.body
            elif t is BlockRealize:
                if m_br:
                    append((s, parents))
                parents += (s, s.block)
                s = s.block.body
            elif t is SeqStmt:
                if m_seq:
                    append((s, parents))
                inner = parents + (s,)
                for x in reversed(s.stmts):
                    push((x, inner))
                break
            elif t is IfThenElse:
                if m_if:
                    append((s, parents))
                parents += (s,)
                if s.else_case is not None:
                    push((s.else_case, parents))
                s = s.then_case
            elif t is Allocate or t is Block:
                if m_alloc if t is Allocate else m_block:
                    append((s, parents))
                parents += (s,)
                s = s.body
            else:  # a leaf, or a subclass of a kind above
                if isinstance(s, types):
                    append((s, parents))
                if _STMT_CHILDREN.get(t) is _no_children:
                    break
                kids = stmt_children(s)
                if kids:
                    inner = parents + ((s, s.block) if isinstance(s, BlockRealize) else (s,))
                    for x in reversed(kids):
                        push((x, inner))
                break
    return out


def _map_for(s, f):
    body = f(s.body)
    if body is s.body:
        return s
    return For(s.loop_var, s.extent, s.kind, body, s.thread, s.annotations)


def _map_seq(s, f):
    new = [f(x) for x in s.stmts]
    for a, b in zip(new, s.stmts):
        if a is not b:
            return seq(*new)
    return s


def _map_if(s, f):
    then = f(s.then_case)
    other = None if s.else_case is None else f(s.else_case)
    if then is s.then_case and other is s.else_case:
        return s
    return IfThenElse(s.cond, then, other)


def _map_allocate(s, f):
    body = f(s.body)
    return s if body is s.body else Allocate(s.buffer, body)


def _map_realize(s, f):
    block = _map_block(s.block, f)
    return s if block is s.block else BlockRealize(s.iter_values, s.predicate, block)


def _map_block(s, f):
    body = f(s.body)
    if body is s.body:
        return s
    return Block(s.name, s.iter_vars, s.reads, s.writes, body, s.init, s.alloc_buffers,
                 s.annotations)


_MAP_CHILDREN: dict = {For: _map_for, SeqStmt: _map_seq, IfThenElse: _map_if,
                       Allocate: _map_allocate, BlockRealize: _map_realize, Block: _map_block}


def _map_leaf(s, f):
    return s


def map_children(s, f: Callable):
    """`s` with each direct child statement c (those of stmt_children) replaced by f(c);
    `s` itself when every f(c) is c. A rebuilt sequence goes through `seq`, so children
    that became sequences are flattened and empty ones vanish."""
    m = _MAP_CHILDREN.get(type(s))
    if m is None:  # a leaf, or a subclass of a kind above
        m = next((g for cls, g in tuple(_MAP_CHILDREN.items()) if issubclass(type(s), cls)),
                 _map_leaf)
        _MAP_CHILDREN[type(s)] = m
    return m(s, f)


# ------------------------------------------------------------------------------ rewriting
def transform(node, fn: Callable, *, pre: Callable | None = None):
    """Post-order rewrite: children first, then `fn(new_node)` (return the node to keep it).

    `pre(node)` may return a replacement that is used without visiting inside it.
    """
    if pre is not None:
        r = pre(node)
        if r is not None:
            return r
    if isinstance(node, _LEAVES):
        return fn(node)
    cls = type(node)
    vals = None
    for i, name in child_fields(cls):
        v = getattr(node, name)
        nv = _transform_value(v, fn, pre)
        if nv is not v:
            if vals is None:
                vals = [getattr(node, n) for n in node_fields(cls)]
            vals[i] = nv
    if vals is not None:
        node = _rebuild(cls, vals)
    return fn(node)


def _transform_value(v, fn, pre):
    if isinstance(v, tuple):
        out, changed = [], False
        for x in v:
            nx = _transform_value(x, fn, pre)
            changed |= nx is not x
            out.append(nx)
        return tuple(out) if changed else v
    if _is_node(v):
        return transform(v, fn, pre=pre)
    return v


def _rebuild(cls, vals):
    """Reconstruct a node; expressions go through their constructors to refold and retype."""
    if cls is Binary:
        return binary(vals[0], vals[1], vals[2])
    if cls is Cast:
        return make_cast(vals[0], vals[1])
    if cls is Select:
        return select(vals[0], vals[1], vals[2])
    if cls is BufferLoad:
        return BufferLoad(vals[0], vals[1], vals[2])
    return cls(*vals)


def _identity(n):
    return n


def substitute(node, vmap: dict):
    """Replace variables by expressions throughout `node`."""
    if not vmap:
        return node

    def pre(n):
        if isinstance(n, Var):
            return vmap.get(n, n)
        if isinstance(n, (IntImm, FloatImm)):
            return n
        return None

    return transform(node, _identity, pre=pre)


def replace_buffers(node, bmap: dict):
    """Point loads, stores and regions of the buffers in `bmap` at their replacements."""
    from .stmt import BufferStore

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer in bmap:
            return BufferLoad(bmap[n.buffer], n.indices, n.dtype)
        if isinstance(n, BufferStore) and n.buffer in bmap:
            return BufferStore(bmap[n.buffer], n.value, n.indices)
        if isinstance(n, BufferRegion) and n.buffer in bmap:
            return BufferRegion(bmap[n.buffer], n.region)
        return n

    return transform(node, fn)


def uses_var(node, var_set) -> bool:
    """Does any variable of `var_set` occur in `node`?"""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            if n in var_set:
                return True
            continue
        if isinstance(n, (IntImm, FloatImm)):
            continue
        stack.extend(children(n))
    return False


def collect_vars(node) -> set:
    out = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            out.add(n)
        elif not isinstance(n, (IntImm, FloatImm)):
            stack.extend(children(n))
    return out
