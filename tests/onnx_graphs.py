"""Random small ONNX graphs for differential fuzzing (tests/test_onnx_fuzz.py): hypothesis
strategies that build 1-6 nodes of the operators looptune's ONNX importer translates, on
float32 (with NaN, infinities, denormals, -0.0 and large magnitudes) and integer and bool
tensors, with the feeds to run them on.

Each node's builder picks operands from the values made so far (or makes a new graph input or
initializer of a shape that fits) and tracks the output's shape and type itself, so a drawn
graph is valid by construction (ONNX Runtime rejecting one is rare and discards it)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

F, I32, I64, B = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
NUMPY = {F: np.float32, I32: np.int32, I64: np.int64, B: np.bool_}
INTS = (I32, I64)

# float32 values that break careless code, in families that one graph does not mix (a
# denormal times infinity, or a sum of large numbers that overflows in one order of addition
# and not in another, has no one right answer): NaN and infinities, -0.0 and denormals, large
SPECIALS = {"nonfinite": [np.nan, np.inf, -np.inf, -0.0], "tiny": [-0.0, 1e-40, -3e-39, 1e-38],
            "large": [1e30, -1e30, 3e38, -3e38]}


@dataclass
class Val:
    name: str
    shape: tuple
    elem: int
    tame: bool = True   # finite and of moderate size (|x| < 100): safe to cast to an integer


@dataclass
class Case:
    """A drawn model and its feeds; repr prints the model as ONNX text (what a shrunk failure
    shows)."""
    model: object
    feeds: dict
    text: str = ""

    def __repr__(self):
        shapes = {k: (v.shape, str(v.dtype)) for k, v in self.feeds.items()}
        return f"Case(feeds={shapes})\n{self.text}"


@dataclass
class _Builder:
    draw: object
    opset: int
    specials: str | None   # the family of special values in the data, if any
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    inits: dict = field(default_factory=dict)
    feeds: dict = field(default_factory=dict)
    pool: list = field(default_factory=list)
    consumed: set = field(default_factory=set)
    count: int = 0

    def fresh(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    # ---------------------------------------------------------------- data
    def data(self, shape, elem, *, nonzero=False, tame=False):
        seed = self.draw(st.integers(0, 2 ** 32 - 1), label="seed")
        rng = np.random.default_rng(seed)
        if elem == B:
            return np.asarray(rng.random(shape) < 0.5)
        if elem in INTS:
            x = rng.integers(-6, 7, shape)
            if nonzero:
                x = np.where(x == 0, 3, x)
            return np.asarray(x, NUMPY[elem])
        scale = float(rng.choice([1.0, 0.01, 50.0]))
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        if self.specials and not tame and x.size:
            hit = rng.random(shape) < 0.3
            x = np.where(hit, rng.choice(np.float32(SPECIALS[self.specials]), shape), x)
        return np.asarray(x, np.float32)

    def leaf(self, shape, elem, *, const=None, nonzero=False, tame=False) -> Val:
        """A new graph input (or initializer when `const`, else drawn)."""
        shape = tuple(shape)
        if const is None:
            const = self.draw(st.booleans(), label="const")
        name = self.fresh("w" if const else "x")
        x = self.data(shape, elem, nonzero=nonzero, tame=tame)
        if const:
            self.inits[name] = x
        else:
            self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
            self.feeds[name] = x
        wild = self.specials and not tame and elem == F
        return Val(name, shape, elem, tame=not wild)

    def ints(self, values) -> str:
        name = self.fresh("k")
        self.inits[name] = np.asarray(values, np.int64)
        return name

    def scalar(self, value, elem=F) -> str:
        name = self.fresh("s")
        self.inits[name] = np.asarray(value, NUMPY[elem])
        return name

    # ---------------------------------------------------------------- operands
    def pick(self, elems=(F,), min_rank=0, max_rank=4, where=None, tame=False,
             fresh=False) -> Val:
        """A value made so far (or a new leaf) of one of these types and ranks; `tame`: one
        without NaN, infinities or large magnitudes; `fresh`: a new leaf."""
        fits = [v for v in self.pool if v.elem in elems and min_rank <= len(v.shape) <= max_rank
                and (where is None or where(v)) and (v.tame or not tame) and not fresh]
        if fits and self.draw(st.integers(0, 3), label="reuse") > 0:
            v = self.draw(st.sampled_from(fits), label="operand")
        else:
            v = self.leaf(self.shape(min_rank, max_rank), self.draw(st.sampled_from(elems)),
                          tame=tame)
        self.consumed.add(v.name)
        return v

    def shape(self, min_rank=0, max_rank=4, max_dim=4):
        rank = self.draw(st.integers(min_rank, max_rank), label="rank")
        return tuple(self.draw(st.lists(st.integers(1, max_dim), min_size=rank,
                                        max_size=rank), label="shape"))

    def broadcastable(self, shape):
        """A shape that broadcasts with `shape` (some dims 1, fewer or more leading dims)."""
        cut = self.draw(st.integers(0, len(shape)), label="cut")
        tail = [1 if self.draw(st.booleans(), label="one") else d for d in shape[cut:]]
        extra = self.draw(st.lists(st.integers(1, 3), max_size=int(cut == 0 and len(shape) < 4)),
                          label="lead")
        return tuple(extra + tail)

    def partner(self, v: Val, elems, fresh=False, **leaf) -> Val:
        """A second operand that broadcasts with v (`fresh`: a new leaf)."""
        fits = [u for u in self.pool if u.elem in elems and _broadcasts(u.shape, v.shape)]
        if fits and not fresh and not leaf and self.draw(st.booleans(), label="reuse2"):
            u = self.draw(st.sampled_from(fits), label="operand2")
            self.consumed.add(u.name)
            return u
        return self.leaf(self.broadcastable(v.shape), self.draw(st.sampled_from(elems)), **leaf)

    # ---------------------------------------------------------------- nodes
    def emit(self, op, inputs, shape, elem, *, tame=False, **attrs) -> Val:
        out = self.fresh("v")
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        v = Val(out, tuple(shape), elem, tame=tame)
        self.pool.append(v)
        return v

    def model(self) -> Case:
        outs = [v for v in self.pool if v.name not in self.consumed] or self.pool[-1:]
        graph = helper.make_graph(
            self.nodes, "fuzz", self.inputs,
            [helper.make_tensor_value_info(v.name, v.elem, None) for v in outs],
            [numpy_helper.from_array(np.asarray(a), n) for n, a in self.inits.items()])
        ops = [helper.make_opsetid("", self.opset)]
        m = helper.make_model(graph, opset_imports=ops)
        m.ir_version = helper.find_min_ir_version_for(ops)
        from onnx import printer
        return Case(m, dict(self.feeds), printer.to_text(m.graph))


def _broadcasts(a, b):
    try:
        return np.broadcast_shapes(a, b) == tuple(b) or np.broadcast_shapes(a, b) == tuple(a)
    except ValueError:
        return False


# ------------------------------------------------------------------ one builder per operator
FLOAT_UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Sqrt", "Neg", "Erf", "Abs", "Log", "Floor",
               "Ceil", "Sin", "Cos", "Softplus", "Sign", "Round", "Reciprocal", "Softsign",
               "HardSwish", "Identity"]
INT_UNARY = ["Neg", "Abs", "Sign", "Identity"]


# A computed value the exact answer puts just below 0 may round to 0 in float32 (a log-softmax
# of its largest element): sqrt, log and 1/x of it, a power of it and a division by it have
# no one right answer, so these read only new leaves.
EDGY = ("Sqrt", "Log", "Reciprocal")


def unary(b: _Builder):
    elem = b.draw(st.sampled_from([F, F, F, I64, I32]), label="elem")
    ops = FLOAT_UNARY if elem == F else INT_UNARY
    op = b.draw(st.sampled_from(ops if b.opset >= 14 else [o for o in ops if o != "HardSwish"]),
                label="op")
    x = b.pick((elem,), fresh=op in EDGY)
    # bounded outputs, but a NaN stays NaN (and sin(inf) is NaN): tame only of a tame input
    bounded = op in ("Sigmoid", "Tanh", "Erf", "Sign", "Sin", "Cos", "Softsign")
    return b.emit(op, [x.name], x.shape, elem, tame=bounded and x.tame)


def activation(b: _Builder):
    x = b.pick((F,))
    choices = [("LeakyRelu", {"alpha": 0.1}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
               ("Celu", {"alpha": 1.5}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
               ("ThresholdedRelu", {"alpha": 0.5}), ("IsNaN", {})]
    if b.opset >= 18:
        choices.append(("Mish", {}))
    if b.opset >= 20:
        choices += [("Gelu", {}), ("Gelu", {"approximate": "tanh"})]
    op, attrs = b.draw(st.sampled_from(choices), label="act")
    return b.emit(op, [x.name], x.shape, B if op == "IsNaN" else F, **attrs)


def binary(b: _Builder):
    elem = b.draw(st.sampled_from([F, F, F, I64, I32]), label="elem")
    ops = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean"] if elem == F else \
        ["Add", "Sub", "Mul", "Max", "Min", "Div"]
    op = b.draw(st.sampled_from(ops), label="op")
    a = b.pick((elem,), fresh=op == "Pow")  # EDGY
    if op == "Div" and elem != F:  # integer division by a divisor that is never 0
        c = b.leaf(b.broadcastable(a.shape), elem, nonzero=True)
    elif op == "Div":
        c = b.partner(a, (F,), fresh=True)  # EDGY
    elif op == "Pow":  # small exponents; integers among them
        c = b.leaf(b.broadcastable(a.shape), F, tame=True) \
            if b.draw(st.booleans()) else Val(b.scalar(b.draw(st.sampled_from(
                [2.0, 0.5, 3.0, -1.0, 1.5]))), (), F)
    else:
        c = b.partner(a, (elem,))
    if b.draw(st.booleans(), label="swap") and op != "Div":
        a, c = c, a
    shape = np.broadcast_shapes(a.shape, c.shape)
    return b.emit(op, [a.name, c.name], shape, elem)


def compare(b: _Builder):
    elem = b.draw(st.sampled_from([F, F, I64, I32, B]), label="elem")
    if elem == B:
        op = b.draw(st.sampled_from(["And", "Or", "Not", "Equal"]), label="op")
    else:
        op = b.draw(st.sampled_from(["Equal", "Less", "LessOrEqual", "Greater",
                                     "GreaterOrEqual"]), label="op")
    a = b.pick((elem,))
    if op == "Not":
        return b.emit(op, [a.name], a.shape, B, tame=True)
    # two computed operands may tie but for rounding (Celu(x) > x on denormals), and so may a
    # computed denormal and a new one (Selu(-3e-39) is -5e-39 or, as exp(x) - 1, 0): the
    # other operand is new and tame (no specials)
    c = b.partner(a, (elem,), **({"tame": True} if elem == F else {}))
    return b.emit(op, [a.name, c.name], np.broadcast_shapes(a.shape, c.shape), B, tame=True)


def where(b: _Builder):
    elem = b.draw(st.sampled_from([F, F, I64]), label="elem")
    x = b.pick((elem,))
    cond = b.partner(x, (B,))
    y = b.partner(Val("", np.broadcast_shapes(x.shape, cond.shape), elem), (elem,))
    shape = np.broadcast_shapes(cond.shape, x.shape, y.shape)
    return b.emit("Where", [cond.name, x.name, y.name], shape, elem)


def cast(b: _Builder):
    src = b.draw(st.sampled_from([F, I64, I32, B]), label="from")
    x = b.pick((src,))
    to = b.draw(st.sampled_from([F, I64, I32, B]), label="to")
    if src == F and to in INTS and not x.tame:
        to = F
    if b.draw(st.booleans(), label="like") and b.opset >= 15:
        like = b.leaf((1,), to, const=True)
        return b.emit("CastLike", [x.name, like.name], x.shape, to, tame=x.tame)
    return b.emit("Cast", [x.name], x.shape, to, tame=x.tame, to=to)


def clip(b: _Builder):
    x = b.pick((F,))
    lo = b.draw(st.sampled_from([None, -1.0, 0.0, -0.5]), label="lo")
    hi = b.draw(st.sampled_from([None, 1.0, 6.0, 0.25]), label="hi")
    ins = [x.name, b.scalar(lo) if lo is not None else "", b.scalar(hi) if hi is not None else ""]
    while ins and ins[-1] == "":
        ins.pop()
    return b.emit("Clip", ins, x.shape, F)


def matmul(b: _Builder):
    a = b.pick((F,), min_rank=1, max_rank=3)
    k = a.shape[-1]
    n = b.draw(st.integers(1, 4), label="n")
    form = b.draw(st.sampled_from(["2d", "1d", "batched"]), label="form")
    if form == "1d":  # a vector on the right: its axis is summed away
        w = b.leaf((k,), F)
        shape = a.shape[:-1]
    else:
        lead = a.shape[:-2] if form == "batched" else ()
        w = b.leaf(lead + (k, n), F)
        shape = a.shape[:-1] + (n,)
    return b.emit("MatMul", [a.name, w.name], shape, F)


def gemm(b: _Builder):
    a = b.pick((F,), min_rank=2, max_rank=2)
    ta, tb = b.draw(st.booleans(), label="transA"), b.draw(st.booleans(), label="transB")
    m, k = a.shape[::-1] if ta else a.shape
    n = b.draw(st.integers(1, 4), label="n")
    w = b.leaf((n, k) if tb else (k, n), F)
    ins = [a.name, w.name]
    if b.draw(st.booleans(), label="bias"):
        ins.append(b.leaf(b.draw(st.sampled_from([(n,), (1, n), (m, n), (m, 1), ()])), F).name)
    alpha = b.draw(st.sampled_from([1.0, 0.5, -2.0]), label="alpha")
    beta = b.draw(st.sampled_from([1.0, 0.25]), label="beta")
    return b.emit("Gemm", ins, (m, n), F, transA=int(ta), transB=int(tb), alpha=alpha, beta=beta)


def _window(b, size, *, dilate=True):
    k = b.draw(st.integers(1, min(3, size)), label="kernel")
    s = b.draw(st.integers(1, 2), label="stride")
    d = b.draw(st.integers(1, 2), label="dilation") if dilate and (k - 1) * 2 + 1 <= size else 1
    return k, s, d


def _pads_attrs(b, nd, kernel):
    mode = b.draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]),
                  label="auto_pad")
    if mode != "NOTSET":
        return {"auto_pad": mode}
    pads = [b.draw(st.integers(0, max(0, k - 1)), label="pad") for k in kernel for _ in (0,)]
    pads += [b.draw(st.integers(0, max(0, k - 1)), label="pad") for k in kernel]
    return {"pads": pads}


def _out_size(size, k, s, d, attrs, i, nd, ceil=False):
    ext = (k - 1) * d + 1
    mode = attrs.get("auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        return -(-size // s)
    pad = attrs["pads"][i] + attrs["pads"][i + nd] if mode == "NOTSET" else 0
    span = size + pad - ext
    return (-(-span // s) if ceil else span // s) + 1


def conv(b: _Builder):
    nd = b.draw(st.integers(1, 2), label="nd")
    x = b.pick((F,), min_rank=nd + 2, max_rank=nd + 2,
               where=lambda v: all(s >= 1 for s in v.shape))
    c = x.shape[1]
    group = b.draw(st.sampled_from([g for g in (1, 2, c) if c % g == 0]), label="group")
    m = group * b.draw(st.integers(1, 2), label="per_group")
    wins = [_window(b, s) for s in x.shape[2:]]
    kernel = [w[0] for w in wins]
    attrs = _pads_attrs(b, nd, kernel)
    if "auto_pad" in attrs and attrs["auto_pad"] != "VALID":  # ONNX Runtime: no dilations
        wins = [(k, s, 1) for k, s, _ in wins]
    attrs.update(strides=[w[1] for w in wins], dilations=[w[2] for w in wins], group=group)
    out = [_out_size(s, k, st_, d, attrs, i, nd) for i, (s, (k, st_, d))
           in enumerate(zip(x.shape[2:], wins))]
    # finite weights: a padded zero times an infinite weight is NaN where the padding is
    # multiplied (looptune) and nothing where it is skipped (ONNX Runtime)
    w = b.leaf((m, c // group, *kernel), F, const=True, tame=True)
    ins = [x.name, w.name]
    if b.draw(st.booleans(), label="bias"):
        ins.append(b.leaf((m,), F, const=True, tame=True).name)
    return b.emit("Conv", ins, (x.shape[0], m, *out), F, **attrs)


def pool(b: _Builder):
    nd = b.draw(st.integers(1, 2), label="nd")
    op = b.draw(st.sampled_from(["MaxPool", "AveragePool", "GlobalAveragePool",
                                 "GlobalMaxPool"]), label="op")
    x = b.pick((F,), min_rank=nd + 2, max_rank=nd + 2, tame="Max" in op)  # NAN_BLIND
    if op.startswith("Global"):
        return b.emit(op, [x.name], x.shape[:2] + (1,) * nd, F)
    wins = [_window(b, s, dilate=False) for s in x.shape[2:]]
    kernel = [w[0] for w in wins]
    attrs = _pads_attrs(b, nd, kernel)
    if "pads" in attrs:  # ONNX: a pad must be smaller than the kernel
        attrs["pads"] = [min(p, kernel[i % nd] - 1) for i, p in enumerate(attrs["pads"])]
    ceil = b.draw(st.booleans(), label="ceil")
    attrs.update(kernel_shape=kernel, strides=[w[1] for w in wins], ceil_mode=int(ceil))
    if op == "AveragePool":
        attrs["count_include_pad"] = int(b.draw(st.booleans(), label="include_pad"))
    out = []
    for i, (s, (k, st_, _)) in enumerate(zip(x.shape[2:], wins)):
        o = _out_size(s, k, st_, 1, attrs, i, nd, ceil=ceil)
        if ceil and "pads" in attrs and (o - 1) * st_ >= s + attrs["pads"][i]:
            o -= 1
        out.append(o)
    return b.emit(op, [x.name], x.shape[:2] + tuple(out), F, **attrs)


# NAN_BLIND: ONNX Runtime's MaxPool, GlobalMaxPool, ReduceMax and ReduceMin skip a NaN (unless
# it comes first), where looptune propagates it as numpy does (DESIGN.md, contract 11): they
# get inputs without NaN.
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
          "ReduceSumSquare", "ReduceL2"]


def reduce(b: _Builder):
    elem = b.draw(st.sampled_from([F, F, F, I64]), label="elem")
    ops = REDUCE if elem == F else ["ReduceSum", "ReduceMax", "ReduceMin"]
    op = b.draw(st.sampled_from(ops), label="op")
    x = b.pick((elem,), min_rank=1, tame=op in ("ReduceMax", "ReduceMin"))  # NAN_BLIND
    rank = len(x.shape)
    axes = b.draw(st.lists(st.integers(-rank, rank - 1), max_size=rank,
                           unique_by=lambda a: a % rank), label="axes")
    keep = b.draw(st.booleans(), label="keepdims")
    attrs = {"keepdims": int(keep)}
    ins = [x.name]
    if axes:
        if op == "ReduceSum" or b.opset >= 18:
            ins.append(b.ints(axes))
        else:
            attrs["axes"] = axes
    red = {a % rank for a in axes} or set(range(rank))
    shape = tuple(1 if i in red else s for i, s in enumerate(x.shape) if keep or i not in red)
    return b.emit(op, ins, shape, elem, **attrs)


def softmax(b: _Builder):
    x = b.pick((F,), min_rank=1)
    axis = b.draw(st.integers(-len(x.shape), len(x.shape) - 1), label="axis")
    op = b.draw(st.sampled_from(["Softmax", "LogSoftmax"]), label="op")
    return b.emit(op, [x.name], x.shape, F, axis=axis)


def reshape(b: _Builder):
    x = b.pick((F, I64, B), min_rank=0)
    n = int(np.prod(x.shape))
    dims = []
    rest = n
    for _ in range(b.draw(st.integers(0, 3), label="rank")):
        d = b.draw(st.sampled_from([f for f in range(1, rest + 1) if rest % f == 0]))
        dims.append(d)
        rest //= d
    if rest != 1 or not dims:
        dims.append(rest)
    shape = list(dims)
    spelled = list(dims)
    if b.draw(st.booleans(), label="minus1"):
        spelled[b.draw(st.integers(0, len(dims) - 1))] = -1
    for i, d in enumerate(spelled):  # 0 copies the input's dimension
        if i < len(x.shape) and d == x.shape[i] and b.draw(st.booleans(), label="zero"):
            spelled[i] = 0
    return b.emit("Reshape", [x.name, b.ints(spelled)], shape, x.elem, tame=x.tame)


def transpose(b: _Builder):
    x = b.pick((F, I64, B), min_rank=1)
    perm = b.draw(st.permutations(range(len(x.shape))), label="perm")
    return b.emit("Transpose", [x.name], tuple(x.shape[p] for p in perm), x.elem, tame=x.tame,
                  perm=list(perm))


def concat(b: _Builder):
    x = b.pick((F, I64), min_rank=1)
    axis = b.draw(st.integers(-len(x.shape), len(x.shape) - 1), label="axis")
    parts = [x]
    for _ in range(b.draw(st.integers(1, 2), label="parts")):
        shape = list(x.shape)
        shape[axis] = b.draw(st.integers(1, 3), label="len")
        parts.append(b.leaf(shape, x.elem))
    if b.draw(st.booleans(), label="shuffle"):
        parts = parts[::-1]
    shape = list(x.shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    return b.emit("Concat", [p.name for p in parts], shape, x.elem, axis=axis)


def slice_(b: _Builder):
    x = b.pick((F, I64), min_rank=1)
    rank = len(x.shape)
    axes = b.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank,
                           unique_by=lambda a: a % rank), label="axes")
    starts, ends, steps, shape = [], [], [], list(x.shape)
    for a in axes:
        n = x.shape[a]
        step = b.draw(st.sampled_from([1, 1, 2, -1, -2]), label="step")
        start = b.draw(st.integers(-n - 2, n + 2), label="start")
        end = b.draw(st.sampled_from([b.draw(st.integers(-n - 2, n + 2), label="end"),
                                      2 ** 62, -2 ** 62]), label="end_kind")
        starts.append(start)
        ends.append(end)
        steps.append(step)
        shape[a % rank] = len(range(*slice(start, end, step).indices(n)))
    if 0 in shape:  # an empty result: nothing to compare
        return None
    ins = [x.name, b.ints(starts), b.ints(ends), b.ints(axes), b.ints(steps)]
    return b.emit("Slice", ins, shape, x.elem, tame=x.tame)


def squeeze(b: _Builder):
    x = b.pick((F, I64), min_rank=0)
    rank = len(x.shape)
    if b.draw(st.booleans(), label="unsqueeze") or 1 not in x.shape:
        out_rank = rank + b.draw(st.integers(1, 2), label="new")
        axes = b.draw(st.lists(st.integers(-out_rank, out_rank - 1), min_size=out_rank - rank,
                               max_size=out_rank - rank, unique_by=lambda a: a % out_rank))
        shape = list(x.shape)
        for a in sorted(a % out_rank for a in axes):
            shape.insert(a, 1)
        return b.emit("Unsqueeze", [x.name, b.ints(axes)], shape, x.elem, tame=x.tame)
    ones = [i for i, s in enumerate(x.shape) if s == 1]
    axes = b.draw(st.lists(st.sampled_from(ones), unique=True), label="axes")
    ins = [x.name] + ([b.ints([a - rank if b.draw(st.booleans()) else a for a in axes])]
                      if axes else [])
    drop = set(axes) or set(ones)
    return b.emit("Squeeze", ins, [s for i, s in enumerate(x.shape) if i not in drop], x.elem,
                  tame=x.tame)


def flatten(b: _Builder):
    x = b.pick((F, I64), min_rank=1)
    axis = b.draw(st.integers(-len(x.shape), len(x.shape)), label="axis")
    a = axis + len(x.shape) if axis < 0 else axis
    return b.emit("Flatten", [x.name], (int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:]))),
                  x.elem, tame=x.tame, axis=axis)


def expand_tile_pad(b: _Builder):
    x = b.pick((F, I64), min_rank=1, max_rank=3)
    op = b.draw(st.sampled_from(["Expand", "Tile", "Pad"]), label="op")
    if op == "Expand":
        shape = b.broadcastable(x.shape)
        out = np.broadcast_shapes(x.shape, shape)
        return b.emit(op, [x.name, b.ints(shape)], out, x.elem, tame=x.tame)
    if op == "Tile":
        reps = [b.draw(st.integers(1, 2), label="rep") for _ in x.shape]
        return b.emit(op, [x.name, b.ints(reps)], [s * r for s, r in zip(x.shape, reps)],
                      x.elem, tame=x.tame)
    pads = [b.draw(st.integers(-1 if s > 1 else 0, 2), label="pad") for s in x.shape * 2]
    out = [s + lo + hi for s, lo, hi in zip(x.shape, pads, pads[len(x.shape):])]
    if min(out) < 1:
        return None
    ins = [x.name, b.ints(pads)]
    if b.draw(st.booleans(), label="value"):
        ins.append(b.scalar(b.draw(st.sampled_from([1.5, -2.0])), x.elem))
    return b.emit(op, ins, out, x.elem)


def split(b: _Builder):
    x = b.pick((F,), min_rank=1)
    axis = b.draw(st.integers(-len(x.shape), len(x.shape) - 1), label="axis")
    n = x.shape[axis]
    cut = b.draw(st.integers(0, n), label="cut")
    sizes = [c for c in (cut, n - cut) if c]
    outs = [b.fresh("v") for _ in sizes]
    b.nodes.append(helper.make_node("Split", [x.name, b.ints(sizes)], outs, axis=axis))
    for o, size in zip(outs, sizes):
        shape = list(x.shape)
        shape[axis] = size
        b.pool.append(Val(o, tuple(shape), F, tame=False))
    return b.pool[-1]


def misc(b: _Builder):
    op = b.draw(st.sampled_from(["PRelu", "Mod", "LayerNormalization", "Max3", "Sum3"]),
                label="op")
    x = b.pick((F,), min_rank=1)
    if op == "PRelu":  # the slope broadcasts to x (unidirectionally)
        slope = b.leaf(b.broadcastable(x.shape)[-len(x.shape):], F)
        return b.emit(op, [x.name, slope.name], x.shape, F)
    if op == "Mod":
        c = b.partner(x, (F,), fresh=True)  # EDGY
        return b.emit(op, [x.name, c.name], np.broadcast_shapes(x.shape, c.shape), F, fmod=1)
    if op == "LayerNormalization" and b.opset >= 17:
        axis = b.draw(st.integers(-len(x.shape), len(x.shape) - 1), label="axis")
        norm = x.shape[axis:]
        ins = [x.name, b.leaf(norm, F, const=True).name]
        if b.draw(st.booleans(), label="bias"):
            ins.append(b.leaf(norm, F, const=True).name)
        return b.emit(op, ins, x.shape, F, axis=axis, epsilon=1e-3)
    if op == "LayerNormalization":
        return None
    y, z = b.partner(x, (F,)), b.partner(x, (F,))
    shape = np.broadcast_shapes(x.shape, y.shape)
    if not _broadcasts(z.shape, shape):
        return None
    return b.emit(op[:-1], [x.name, y.name, z.name], np.broadcast_shapes(shape, z.shape), F)


BUILDERS = [unary, activation, binary, binary, compare, where, cast, clip, matmul, gemm, conv,
            pool, reduce, reduce, softmax, reshape, transpose, concat, slice_, squeeze, flatten,
            expand_tile_pad, split, misc]


@st.composite
def onnx_cases(draw, max_nodes: int = 6) -> Case:
    """A random model of 1 to max_nodes nodes and the feeds to run it on."""
    b = _Builder(draw, draw(st.sampled_from([13, 17, 18, 21]), label="opset"),
                 draw(st.sampled_from([None, *SPECIALS]), label="specials"))
    for _ in range(draw(st.integers(1, max_nodes), label="nodes")):
        build = draw(st.sampled_from(BUILDERS), label="builder")
        build(b)
    if not b.nodes:
        unary(b)
    return b.model()
