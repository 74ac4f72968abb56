"""Random small quantized ONNX graphs for differential fuzzing (tests/test_onnx_quant_fuzz.py):
hypothesis strategies that build 1-5 groups of the forms onnxruntime.quantization emits and
looptune's importer translates (onnx_quant.py, onnx_qlinear.py), with the feeds to run them on:

- QDQ groups as quantize_static writes them: DequantizeLinear of each quantized operand
  (constant weights per channel or per tensor, an int32 bias in input_scale * weight_scale
  units), one float operator (Conv, MatMul, Gemm, Add, Mul, pooling, Softmax, activations,
  Concat, data movement), then QuantizeLinear (or a float output);
- QOperator nodes: QLinearConv, QLinearMatMul, MatMulInteger, ConvInteger and com.microsoft's
  QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearConcat,
  QLinearAveragePool, QLinearGlobalAveragePool, QGemm;
- quantize_dynamic's chains: DynamicQuantizeLinear -> MatMulInteger / ConvInteger -> Cast ->
  Mul by the two scales (-> Add of the bias);
- QuantizeLinear and DequantizeLinear of their own (per axis, 16-bit at opset 21).

Tensors are int8 or uint8, scales and zero points are drawn valid (symmetric and asymmetric,
powers of two among them, where ties are frequent) and fit the range each float tensor is
estimated to span, so that the quantized values use most of their range (and some saturate).
Float inputs never hold 0, and some hold exact ties of the scale they are quantized with.

Each group's builder tracks the shapes, types and quantization of what it makes, so a drawn
graph is valid by construction, and gives each value it makes a comparison spec (`Spec`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnx_graphs import _out_size, _pads_attrs, _window

F, U8, I8, U16, I16, I32 = (TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8,
                            TensorProto.UINT16, TensorProto.INT16, TensorProto.INT32)
NUMPY = {F: np.float32, U8: np.uint8, I8: np.int8, U16: np.uint16, I16: np.int16,
         I32: np.int32}
RANGES = {U8: (0, 255), I8: (-128, 127), U16: (0, 65535), I16: (-32768, 32767)}
BYTES = (U8, I8)
MS = "com.microsoft"


def _host_has_vnni() -> bool:
    from looptune.target import Target
    features = Target.create("cpu").features
    return "avx512_vnni" in features or "avx_vnni" in features


# ONNX Runtime's u8 x s8 GEMM on AVX2 without VNNI adds pairs of products in int16 and
# saturates there (its documented reason for reduce_range): on such a CPU, s8 weights stay
# within 7 bits and s8 activations never meet u8 ones in a product
WIDE_PRODUCTS = _host_has_vnni()


@dataclass
class Quant:
    """How a tensor is quantized: its element type, scale and zero point (one value, or one
    per element of `axis`), and the initializers that hold them (zero point: "" if none)."""
    elem: int
    scale: np.ndarray
    zp: np.ndarray
    axis: int | None = None
    names: tuple = ("", "")

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    def real(self):
        """(lo, hi): the range of real values the type holds (in every channel)."""
        lo, hi = RANGES[self.elem]
        s, z = self.scale.astype(np.float64), self.zp.astype(np.float64)
        return float(np.max((lo - z) * s)), float(np.min((hi - z) * s))


@dataclass
class Spec:
    """How looptune's value is compared with ONNX Runtime's. An integer one: within `steps`
    (1 for the 8- and 16-bit types, 0 for int32 accumulators), and one step off in at most
    two elements or the share `off` of them: a value within float32 rounding of a tie, where
    two ways of computing it round apart, is rare; but a transcendental function's (softmax,
    sigmoid, tanh, a leaky ReLU's slope) of power-of-two steps lands there often, near 0,
    where it is almost linear. A float one: within one step of its scale, `unit`: a number,
    an array that broadcasts to the value, or ("dql", x, factor): factor times the scale
    DynamicQuantizeLinear computes for the value named x."""
    elem: int
    unit: object = 0.0
    steps: int = 1
    off: float = 0.05


TRANSCENDENTAL = 0.5  # Spec.off of a transcendental function's quantized values


@dataclass
class Val:
    name: str
    shape: tuple
    elem: int
    q: Quant | None = None       # a quantized tensor's parameters
    lo: float = -1.0             # the range of its real values (estimated where computed)
    hi: float = 1.0
    made: bool = False           # computed by a node (else a graph input)

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi), 1e-6)


@dataclass
class Case:
    """A drawn model, its feeds, the comparison spec of every value its nodes make, and the
    values a comparison needs beyond them (`needs`); repr prints the model as ONNX text (what
    a shrunk failure shows)."""
    model: object
    feeds: dict
    specs: dict
    needs: set = field(default_factory=set)
    text: str = ""

    def __repr__(self):
        shapes = {k: (v.shape, str(v.dtype)) for k, v in self.feeds.items()}
        return f"Case(feeds={shapes})\n{self.text}"


def ties(scale: np.float32, ks) -> np.ndarray:
    """float32 values x with x / scale (a float32 division, as ONNX Runtime's) exactly k + 0.5:
    where rounding half to even and half away from zero part."""
    out = []
    for k in ks:
        t = np.float32(k + 0.5)
        x = np.float32(float(t) * float(scale))
        for _ in range(16):
            if x / scale == t:
                out.append(x)
                break
            x = np.nextafter(x, np.float32(np.inf) if x / scale < t else np.float32(-np.inf))
    return np.array(out, np.float32)


def _real(w, q: Quant) -> np.ndarray:
    """The real values of a constant quantized tensor (float64)."""
    z, s = q.zp.astype(np.float64), q.scale.astype(np.float64)
    if q.axis is not None:
        z, s = _along(z, q.axis, w.ndim, keep=True), _along(s, q.axis, w.ndim, keep=True)
    return (w.astype(np.float64) - z) * s


def _along(a, axis, rank, *, keep=False):
    """A per-channel array shaped to broadcast along `axis` of a rank-`rank` tensor (a number
    when it holds one value, unless `keep`)."""
    a = np.asarray(a)
    if a.size == 1 and not keep:
        return float(a.reshape(-1)[0])
    return a.reshape([-1 if d == axis else 1 for d in range(rank)])


def _accumulated(x_mag, w_real, axis_k):
    """About the largest |x @ w| for x spread over +-x_mag: sqrt(3) x_mag times the largest
    2-norm of w along its summed axis (three standard deviations of a sum of random terms)."""
    return float(np.sqrt(3.0) * x_mag * np.sqrt((w_real ** 2).sum(axis=axis_k)).max()) + 1e-6


@dataclass
class _Builder:
    draw: object
    opset: int
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    inits: dict = field(default_factory=dict)
    feeds: dict = field(default_factory=dict)
    pool: list = field(default_factory=list)
    consumed: set = field(default_factory=set)
    specs: dict = field(default_factory=dict)
    needs: set = field(default_factory=set)
    count: int = 0

    def fresh(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def rng(self):
        return np.random.default_rng(self.draw(st.integers(0, 2 ** 32 - 1), label="seed"))

    def init(self, prefix, array) -> str:
        name = self.fresh(prefix)
        self.inits[name] = np.asarray(array)
        return name

    def node(self, op, inputs, outputs, **attrs):
        """A node (op "ms.X": com.microsoft's X), named after its operator."""
        domain = MS if op.startswith("ms.") else ""
        op = op[3:] if domain else op
        inputs = list(inputs)
        while inputs and not inputs[-1]:
            inputs.pop()
        self.nodes.append(helper.make_node(op, inputs, list(outputs), domain=domain,
                                           name=self.fresh(op + "_"), **attrs))
        self.consumed.update(i for i in inputs if i)

    def emit(self, op, inputs, v: Val, spec: Spec, **attrs) -> Val:
        """A node whose one output v is compared (by `spec`) and joins the pool."""
        self.node(op, inputs, [v.name], **attrs)
        return self.made(v, spec)

    def made(self, v: Val, spec: Spec) -> Val:
        v.made = True
        self.specs[v.name] = spec
        self.pool.append(v)
        return v

    # ---------------------------------------------------------------- shapes
    def shape(self, min_rank=1, max_rank=4, max_dim=5):
        rank = self.draw(st.integers(min_rank, max_rank), label="rank")
        return tuple(self.draw(st.lists(st.integers(1, max_dim), min_size=rank,
                                        max_size=rank), label="shape"))

    # ---------------------------------------------------------------- data and parameters
    def float_input(self, shape) -> Val:
        """A new float graph input spread over a drawn range that need not be centred on 0
        (positive ones are what a ReLU makes); never exactly 0."""
        r = self.rng()
        m = float(self.draw(st.sampled_from([0.05, 1.0, 3.0, 40.0]), label="magnitude"))
        kind = self.draw(st.sampled_from(["centred", "positive", "shifted"]), label="spread")
        lo, hi = {"centred": (-m, m), "positive": (m / 50, m), "shifted": (-m / 4, m)}[kind]
        x = r.uniform(lo, hi, shape).astype(np.float32)
        x[x == 0] = np.float32(hi / 3)
        name = self.fresh("x")
        self.inputs.append(helper.make_tensor_value_info(name, F, shape))
        self.feeds[name] = x
        if x.size:
            lo, hi = float(x.min()), float(x.max())
        return Val(name, tuple(shape), F, lo=min(lo, 0.0), hi=max(hi, 0.0))

    def qparams(self, elem, lo, hi, *, n=1) -> tuple:
        """(scale, zero point) of n channels for real values in about [lo, hi], as calibration
        chooses them (the range widened to hold 0, symmetric or not), then scaled by a drawn
        factor: a little wider (headroom) or narrower (saturation); or a power of two."""
        r = self.rng()
        qmin, qmax = RANGES[elem]
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        if hi - lo < 1e-6:
            hi = lo + 1e-3
        symmetric = self.draw(st.booleans(), label="symmetric")
        pow2 = self.draw(st.integers(0, 4), label="pow2") == 0
        factor = self.draw(st.sampled_from([0.75, 0.9, 1.0, 1.0, 1.1, 1.5]), label="fill")
        # and a little more, that two scales' ratio is not a round number by chance (1.5 puts
        # every other value within float32 rounding of a tie, where any two ways of
        # computing it round apart)
        f = factor * r.uniform(0.97, 1.03, n) * (r.uniform(0.7, 1.3, n) if n > 1 else 1.0)
        if symmetric:
            scale = max(-lo, hi) * f / ((qmax - qmin) / 2)
        else:
            scale = (hi - lo) * f / (qmax - qmin)
        if pow2:
            scale = 2.0 ** np.round(np.log2(scale))
        scale = np.maximum(scale, 1e-5).astype(np.float32)
        if symmetric:
            zp = np.full(n, (qmin + qmax + 1) // 2)
        else:
            zp = np.clip(np.round(qmin - lo * f / scale), qmin, qmax)
        return scale, zp.astype(NUMPY[elem])

    def quant(self, elem, lo, hi, shape=(), *, axis=None, vector=False) -> Quant:
        """A Quant for values in [lo, hi] (per `axis` of `shape` when given), with the
        initializers of its scale and zero point (one value: 0-d, or now and then [1] where
        `vector`: com.microsoft's operators take only 0-d ones)."""
        scale, zp = self.qparams(elem, lo, hi, n=shape[axis] if axis is not None else 1)
        if axis is None:
            one = vector and self.draw(st.integers(0, 3), label="vector") == 0
            scale, zp = scale.reshape((1,) if one else ()), zp.reshape((1,) if one else ())
        return Quant(elem, scale, zp, axis, (self.init("s", scale), self.init("z", zp)))

    def weight(self, shape, elem, *, axis=None, symmetric=True) -> tuple:
        """A constant quantized weight: (its initializer, the int array, its Quant), values
        over the whole range (7 bits for s8 on CPUs whose products saturate); an int8 one
        symmetric (zero point 0, now and then not given) unless not `symmetric`."""
        r = self.rng()
        lo, hi = RANGES[elem]
        if elem == I8 and not WIDE_PRODUCTS:
            lo, hi = -64, 63
        w = r.integers(lo, hi + 1, shape).astype(NUMPY[elem])
        n = shape[axis] if axis is not None else 1
        scale = (10.0 ** r.uniform(-3, -1, n)).astype(np.float32)
        if symmetric and elem == I8:
            zp = np.zeros(n, np.int8)
        else:
            zp = r.integers((3 * lo + hi) // 4, (lo + 3 * hi) // 4 + 1, n).astype(NUMPY[elem])
        if axis is None:
            scale, zp = scale.reshape(()), zp.reshape(())
        given = zp.any() or elem != I8 or self.draw(st.integers(0, 2), label="w_zp") > 0
        q = Quant(elem, scale, zp, axis, (self.init("ws", scale),
                                          self.init("wz", zp) if given else ""))
        return self.init("w", w), w, q

    def zp_name(self, q: Quant) -> str:
        """q's zero point initializer, made if q has none (where an operator needs one)."""
        if not q.names[1]:
            q.names = (q.names[0], self.init("z", q.zp))
        return q.names[1]

    # ---------------------------------------------------------------- operands
    def qinput(self, shape, elem=None) -> Val:
        """A new quantized tensor: a float input and its QuantizeLinear (as quantize_static
        writes a model's inputs), or now and then an integer input (a QOperator model's)."""
        elem = elem or self.draw(st.sampled_from(BYTES), label="elem")
        if self.draw(st.integers(0, 3), label="int_input") == 0:
            r = self.rng()
            qmin, qmax = RANGES[elem]
            name = self.fresh("q")
            self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
            self.feeds[name] = r.integers(qmin, qmax + 1, shape).astype(NUMPY[elem])
            q = self.quant(elem, -1.0, 1.0)
            return Val(name, tuple(shape), elem, q, *q.real())
        return quantize(self, self.float_input(shape), elem=elem, per_tensor=True)

    def pick(self, *, elems=BYTES, min_rank=1, max_rank=4, where=None, shape=None) -> Val:
        """A per-tensor quantized value made so far (or a new one) of these types and
        ranks (or this shape)."""
        fits = [v for v in self.pool if v.q is not None and v.elem in elems and v.q.scale.ndim == 0
                and min_rank <= len(v.shape) <= max_rank and (shape is None or v.shape == shape)
                and (where is None or where(v))]
        if fits and self.draw(st.integers(0, 3), label="reuse") > 0:
            return self.draw(st.sampled_from(fits), label="operand")
        shape = self.shape(min_rank, max_rank) if shape is None else shape
        return self.qinput(shape, self.draw(st.sampled_from(elems), label="elem"))

    def pick_float(self, *, min_rank=1, max_rank=4) -> Val:
        fits = [v for v in self.pool if v.elem == F and min_rank <= len(v.shape) <= max_rank]
        if fits and self.draw(st.booleans(), label="reuse_float"):
            return self.draw(st.sampled_from(fits), label="float_operand")
        return self.float_input(self.shape(min_rank, max_rank))

    def dq(self, v: Val) -> Val:
        """DequantizeLinear of v with its own scale and zero point (inside a group)."""
        out = Val(self.fresh("d"), v.shape, F, lo=v.lo, hi=v.hi)
        attrs = {"axis": v.q.axis} if v.q.axis is not None else {}
        self.node("DequantizeLinear", [v.name, *v.q.names], [out.name], **attrs)
        return out

    def requant(self, y: Val, elem=None, *, same: Val | None = None) -> Val:
        """QuantizeLinear of a group's float result y: with `same`'s parameters
        (quantize_static shares them across data movement), or new ones for y's range."""
        q = same.q if same is not None else self.quant(
            elem or self.draw(st.sampled_from(BYTES), label="out_elem"), y.lo, y.hi)
        out = Val(self.fresh("v"), y.shape, q.elem, q, *_clip_range(y, q))
        return self.emit("QuantizeLinear", [y.name, *q.names], out, Spec(q.elem))

    def model(self) -> Case:
        outs = [v for v in self.pool if v.made and v.name not in self.consumed] \
            or [v for v in self.pool if v.made][-1:]
        graph = helper.make_graph(
            self.nodes, "qfuzz", self.inputs,
            [helper.make_tensor_value_info(v.name, v.elem, None) for v in outs],
            [numpy_helper.from_array(np.asarray(a), n) for n, a in self.inits.items()])
        ops = [helper.make_opsetid("", self.opset), helper.make_opsetid(MS, 1)]
        m = helper.make_model(graph, opset_imports=ops)
        m.ir_version = helper.find_min_ir_version_for(ops[:1])
        from onnx import printer
        return Case(m, dict(self.feeds), dict(self.specs), set(self.needs),
                    printer.to_text(m.graph))


def _clip_range(x: Val, q: Quant):
    lo, hi = q.real()
    return max(x.lo, lo), min(x.hi, hi)


def _float(b: _Builder, op, ins, shape, lo=0.0, hi=0.0, **attrs) -> Val:
    """A float node inside a group; its value spans about [lo, hi]."""
    out = Val(b.fresh("f"), tuple(shape), F, lo=lo, hi=hi)
    b.node(op, ins, [out.name], **attrs)
    return out


def _scale1(v: Val) -> np.float32:
    return np.float32(v.q.scale.reshape(-1)[0])


# ------------------------------------------------------------------ Q and DQ of their own
def quantize(b: _Builder, x: Val | None = None, *, elem=None, per_tensor=False) -> Val:
    """QuantizeLinear of a float value (a new input, or one made so far), per tensor or per
    axis, 8-bit (16-bit at opset 21), its type from the zero point or output_dtype or the
    default uint8; some of a new input's values at exact ties of the scale."""
    if x is None:
        x = b.float_input(b.shape()) if b.draw(st.integers(0, 2), label="new") \
            else b.pick_float()
    choices = list(BYTES) + ([U16, I16] if b.opset >= 21 else [])
    elem = elem or b.draw(st.sampled_from(choices), label="elem")
    axis = None
    if not per_tensor and x.shape and b.draw(st.integers(0, 3), label="per_axis") == 0:
        axis = b.draw(st.integers(-len(x.shape), len(x.shape) - 1), label="axis")
    q = b.quant(elem, x.lo, x.hi, x.shape, axis=None if axis is None else axis % len(x.shape),
                vector=not per_tensor)
    ins, attrs = [x.name, *q.names], {} if axis is None else {"axis": axis}
    if not q.zp.any():
        if b.opset >= 21 and elem != U8 and b.draw(st.booleans(), label="output_dtype"):
            ins, attrs["output_dtype"] = ins[:2], elem
        elif elem == U8 and b.draw(st.booleans(), label="no_zp"):
            ins = ins[:2]
    if x.name in b.feeds and q.per_tensor and b.draw(st.booleans(), label="ties"):
        flat = b.feeds[x.name].reshape(-1)
        z = int(q.zp.reshape(-1)[0])
        qmin, qmax = RANGES[elem]
        t = ties(np.float32(q.scale.reshape(-1)[0]), range(max(qmin - z, -20), min(qmax - z, 20)))
        t = t[t != 0][: max(1, flat.size // 3)]
        flat[b.rng().choice(flat.size, t.size, replace=False)] = t
    out = Val(b.fresh("v"), x.shape, elem, q, x.lo, x.hi)
    return b.emit("QuantizeLinear", ins, out, Spec(elem), **attrs)


def dequantize(b: _Builder) -> Val:
    """DequantizeLinear of a quantized value made so far (per axis, 16-bit where it is one)
    or of a new one: a float output within one step of its scale."""
    fits = [v for v in b.pool if v.q is not None]
    v = b.draw(st.sampled_from(fits), label="operand") if fits else b.pick()
    out = b.dq(v)
    return b.made(out, Spec(F, _along(v.q.scale, v.q.axis, len(v.shape))))


# ------------------------------------------------------------------ QDQ groups
def _conv_shape(b, x_shape):
    """(weight shape, output shape, attributes) of a drawn convolution of x."""
    nd = len(x_shape) - 2
    c = x_shape[1]
    group = b.draw(st.sampled_from([g for g in (1, 2, c) if c % g == 0]), label="group")
    m = group * b.draw(st.integers(1, 2), label="per_group")
    wins = [_window(b, s) for s in x_shape[2:]]
    kernel = [w[0] for w in wins]
    attrs = _pads_attrs(b, nd, kernel)
    if "auto_pad" in attrs and attrs["auto_pad"] != "VALID":  # ONNX Runtime: no dilations
        wins = [(k, s, 1) for k, s, _ in wins]
    attrs.update(strides=[w[1] for w in wins], dilations=[w[2] for w in wins], group=group)
    out = [_out_size(s, k, st_, d, attrs, i, nd) for i, (s, (k, st_, d))
           in enumerate(zip(x_shape[2:], wins))]
    return (m, c // group, *kernel), (x_shape[0], m, *out), attrs


def _weight_elem(b, x_elem):
    """The weight type of a product with x: int8 mostly, uint8 with uint8 x (ONNX Runtime
    has no s8 x u8 kernels)."""
    return b.draw(st.sampled_from([I8, I8, U8]), label="w_elem") if x_elem == U8 else I8


def _end(b, y: Val, x: Val, unit, *, relu=False):
    """A group's end: (Relu ->) QuantizeLinear, mostly to x's type; or (where `unit` is one
    step of the accumulator) y itself, a float output. (ONNX Runtime fuses the Relu into the
    group where the QuantizeLinear's range starts at 0.)"""
    if relu and b.draw(st.integers(0, 3), label="relu") == 0:
        y = _float(b, "Relu", [y.name], y.shape, 0.0, y.hi)
    if unit is not None and b.draw(st.integers(0, 4), label="float_out") == 0:
        return b.made(y, Spec(F, unit))
    return b.requant(y, x.elem if b.draw(st.integers(0, 4), label="same_type") else None)


def _bias(b, name, mag, scale, n):
    """An int32 bias of n values up to about mag in `scale` units (one or n of them)."""
    return b.init(name, np.round(b.rng().uniform(-mag, mag, n) / scale).astype(np.int32))


def qdq_conv(b: _Builder):
    """DQ(x), DQ(w) per output channel or per tensor, DQ(int32 bias) -> Conv (-> Relu) -> Q,
    or a float output."""
    nd = b.draw(st.integers(1, 2), label="nd")
    x = b.pick(min_rank=nd + 2, max_rank=nd + 2)
    wshape, shape, attrs = _conv_shape(b, x.shape)
    per_channel = b.draw(st.booleans(), label="per_channel")
    wname, w, wq = b.weight(wshape, _weight_elem(b, x.elem), axis=0 if per_channel else None)
    ins = [b.dq(x).name, b.dq(Val(wname, wshape, wq.elem, wq)).name]
    mag = _accumulated(x.mag, _real(w, wq).reshape(wshape[0], -1), 1)
    unit = (_scale1(x) * wq.scale).astype(np.float32)  # float32, as quantize_static's
    if b.draw(st.booleans(), label="bias"):
        bq = Quant(I32, unit, np.zeros(unit.shape, np.int32), wq.axis, (b.init("bs", unit), ""))
        ins.append(b.dq(Val(_bias(b, "bias", mag, unit, wshape[0]), (wshape[0],), I32, bq)).name)
    y = _float(b, "Conv", ins, shape, -mag, mag, **attrs)
    return _end(b, y, x, _along(unit, 1, len(shape)), relu=True)


def qdq_matmul(b: _Builder):
    """DQ(a) @ DQ(constant weight, per column or per tensor), or of two activations -> Q."""
    a = b.pick(min_rank=1, max_rank=3)
    k, n = a.shape[-1], b.draw(st.integers(1, 5), label="n")
    if b.draw(st.integers(0, 2), label="activations") == 0:
        c = b.pick(shape=a.shape[:-2] + (k, n), elems=(U8, I8) if WIDE_PRODUCTS else (a.elem,))
        ins = [b.dq(a).name, b.dq(c).name]
        mag, unit = float(np.sqrt(k)) * a.mag * c.mag, float(_scale1(a) * _scale1(c))
    else:
        per_column = b.draw(st.booleans(), label="per_column")
        wname, w, wq = b.weight((k, n), _weight_elem(b, a.elem), axis=1 if per_column else None)
        ins = [b.dq(a).name, b.dq(Val(wname, (k, n), wq.elem, wq)).name]
        mag = _accumulated(a.mag, _real(w, wq), 0)
        unit = _along((_scale1(a) * wq.scale).astype(np.float32), 0, 1)
    return _end(b, _float(b, "MatMul", ins, a.shape[:-1] + (n,), -mag, mag), a, unit)


def qdq_gemm(b: _Builder):
    """DQ(a) x DQ(weight) (transposed or not) + DQ(int32 bias) -> Q, as quantize_static
    writes a Gemm."""
    a = b.pick(min_rank=2, max_rank=2)
    (m, k), n = a.shape, b.draw(st.integers(1, 5), label="n")
    tb = b.draw(st.booleans(), label="transB")
    per_column = b.draw(st.booleans(), label="per_column")
    wshape = (n, k) if tb else (k, n)
    wname, w, wq = b.weight(wshape, _weight_elem(b, a.elem),
                            axis=(0 if tb else 1) if per_column else None)
    ins = [b.dq(a).name, b.dq(Val(wname, wshape, wq.elem, wq)).name]
    mag = _accumulated(a.mag, _real(w, wq), 1 if tb else 0)
    unit = (_scale1(a) * wq.scale).astype(np.float32)
    if b.draw(st.booleans(), label="bias"):
        bq = Quant(I32, unit, np.zeros(unit.shape, np.int32), 0 if per_column else None,
                   (b.init("bs", unit), ""))
        ins.append(b.dq(Val(_bias(b, "bias", mag, unit, n), (n,), I32, bq)).name)
    y = _float(b, "Gemm", ins, (m, n), -mag, mag, transB=int(tb))
    return _end(b, y, a, _along(unit, 1, 2))


def _partner(b, a: Val, elems) -> Val:
    """A per-tensor quantized value whose shape broadcasts with a's."""
    cut = b.draw(st.integers(0, len(a.shape)), label="cut")
    shape = tuple(1 if b.draw(st.booleans(), label="one") else d for d in a.shape[cut:])
    return b.pick(shape=shape, elems=elems, min_rank=0)


def _product_range(a: Val, c: Val, op):
    if op.endswith("Add"):
        return a.lo + c.lo, a.hi + c.hi
    corners = [x * y for x in (a.lo, a.hi) for y in (c.lo, c.hi)]
    return min(corners), max(corners)


def qdq_binary(b: _Builder):
    """DQ(a) + / * DQ(b) -> Q (ONNX Runtime runs it as QLinearAdd / QLinearMul where the
    three types agree)."""
    a = b.pick()
    c = _partner(b, a, (a.elem,) if b.draw(st.integers(0, 3), label="same_elem") else BYTES)
    op = b.draw(st.sampled_from(["Add", "Mul"]), label="op")
    if b.draw(st.booleans(), label="swap"):
        a, c = c, a
    shape = np.broadcast_shapes(a.shape, c.shape)
    y = _float(b, op, [b.dq(a).name, b.dq(c).name], shape, *_product_range(a, c, op))
    return _end(b, y, a, None, relu=True)


def _pool_attrs(b, x_shape):
    """(attributes, output shape) of a drawn pooling window over an NC... tensor."""
    nd = len(x_shape) - 2
    wins = [_window(b, s, dilate=False) for s in x_shape[2:]]
    kernel = [w[0] for w in wins]
    attrs = _pads_attrs(b, nd, kernel)
    if "pads" in attrs:  # ONNX: a pad must be smaller than the kernel
        attrs["pads"] = [min(p, kernel[i % nd] - 1) for i, p in enumerate(attrs["pads"])]
    ceil = b.draw(st.booleans(), label="ceil")
    attrs.update(kernel_shape=kernel, strides=[w[1] for w in wins], ceil_mode=int(ceil))
    out = []
    for i, (s, (k, st_, _)) in enumerate(zip(x_shape[2:], wins)):
        o = _out_size(s, k, st_, 1, attrs, i, nd, ceil=ceil)
        if ceil and "pads" in attrs and (o - 1) * st_ >= s + attrs["pads"][i]:
            o -= 1
        out.append(o)
    return attrs, tuple(x_shape[:2]) + tuple(out)


def qdq_pool(b: _Builder):
    """DQ -> AveragePool / GlobalAveragePool / MaxPool / GlobalMaxPool -> Q."""
    x = b.pick(min_rank=3, max_rank=4)
    op = b.draw(st.sampled_from(["AveragePool", "AveragePool", "GlobalAveragePool", "MaxPool",
                                 "GlobalMaxPool"]), label="op")
    if op.startswith("Global"):
        y = _float(b, op, [b.dq(x).name], x.shape[:2] + (1,) * (len(x.shape) - 2), x.lo, x.hi)
    else:
        attrs, shape = _pool_attrs(b, x.shape)
        if op == "AveragePool":
            attrs["count_include_pad"] = int(b.draw(st.booleans(), label="include_pad"))
        y = _float(b, op, [b.dq(x).name], shape, x.lo, x.hi, **attrs)
    if "Max" in op and b.draw(st.integers(0, 3), label="same_q") > 0:
        return b.requant(y, same=x)
    return _end(b, y, x, None)


def _probabilities(b, elem) -> Quant:
    """What quantize_static writes for probabilities: 1/256 per step from the type's
    lowest value."""
    s = np.float32(b.draw(st.sampled_from([1 / 256, 1 / 255]), label="step"))
    q = Quant(elem, np.asarray(s), np.asarray(RANGES[elem][0], NUMPY[elem]))
    q.names = (b.init("s", q.scale), b.init("z", q.zp))
    return q


def qdq_unary(b: _Builder):
    """DQ -> Softmax / Sigmoid / LeakyRelu / Relu / Clip / Tanh -> Q."""
    op = b.draw(st.sampled_from(["Softmax", "Softmax", "Sigmoid", "LeakyRelu", "Relu", "Clip",
                                 "Tanh"]), label="op")
    x = b.pick()
    attrs, ins = {}, [b.dq(x).name]
    lo, hi = {"Softmax": (0.0, 1.0), "Sigmoid": (0.0, 1.0), "Tanh": (-1.0, 1.0)}.get(
        op, (0.0 if op in ("Relu", "Clip") else x.lo, x.hi))
    if op == "Softmax":
        attrs["axis"] = b.draw(st.integers(-len(x.shape), len(x.shape) - 1), label="axis")
    elif op == "LeakyRelu":
        attrs["alpha"] = b.draw(st.sampled_from([0.01, 0.1, 0.3]), label="alpha")
        lo = x.lo * attrs["alpha"]
    elif op == "Clip":
        hi = float(np.float32(x.hi * 0.6))
        ins += [b.init("lo", np.float32(0.0)), b.init("hi", np.float32(hi))]
    y = _float(b, op, ins, x.shape, lo, hi, **attrs)
    if op in ("Softmax", "Sigmoid") and b.draw(st.booleans(), label="fixed"):
        q = _probabilities(b, b.draw(st.sampled_from(BYTES), label="out_elem"))
        v = b.emit("QuantizeLinear", [y.name, *q.names],
                   Val(b.fresh("v"), y.shape, q.elem, q, 0.0, 1.0), Spec(q.elem))
    elif op in ("Relu", "Clip") and b.draw(st.booleans(), label="same_q"):
        return b.requant(y, same=x)
    else:
        v = _end(b, y, x, None)
    if op not in ("Relu", "Clip"):
        b.specs[v.name].off = TRANSCENDENTAL
    return v


def _concat_parts(b, x: Val):
    axis = b.draw(st.integers(-len(x.shape), len(x.shape) - 1), label="axis")
    parts = [x]
    for _ in range(b.draw(st.integers(1, 2), label="parts")):
        shape = list(x.shape)
        shape[axis] = b.draw(st.integers(1, 3), label="len")
        parts.append(b.pick(shape=tuple(shape), elems=(x.elem,)))
    if b.draw(st.booleans(), label="shuffle"):
        parts = parts[::-1]
    shape = list(x.shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    return parts, axis, tuple(shape), min(p.lo for p in parts), max(p.hi for p in parts)


def qdq_concat(b: _Builder):
    """DQ of 2-3 quantized values -> Concat -> Q (ONNX Runtime: QLinearConcat)."""
    parts, axis, shape, lo, hi = _concat_parts(b, b.pick())
    y = _float(b, "Concat", [b.dq(p).name for p in parts], shape, lo, hi, axis=axis)
    if b.draw(st.booleans(), label="same_q"):
        return b.requant(y, same=parts[0])
    return _end(b, y, parts[0], None)


def qdq_movement(b: _Builder):
    """DQ -> Reshape / Transpose / Flatten / Unsqueeze / Squeeze -> Q, mostly with the
    input's parameters (ONNX Runtime then moves the 8-bit values)."""
    op = b.draw(st.sampled_from(["Reshape", "Transpose", "Flatten", "Unsqueeze", "Squeeze"]),
                label="op")
    x = b.pick()
    ins, attrs, rank = [b.dq(x).name], {}, len(x.shape)
    if op == "Reshape":
        shape = [int(np.prod(x.shape))]
        for d in (2, 3):
            if shape[-1] % d == 0 and b.draw(st.booleans(), label="split"):
                shape = shape[:-1] + [d, shape[-1] // d]
        spelled = list(shape)
        if b.draw(st.booleans(), label="minus1"):
            spelled[b.draw(st.integers(0, len(shape) - 1), label="at")] = -1
        ins.append(b.init("k", np.asarray(spelled, np.int64)))
    elif op == "Transpose":
        perm = b.draw(st.permutations(range(rank)), label="perm")
        shape, attrs = [x.shape[p] for p in perm], {"perm": list(perm)}
    elif op == "Flatten":
        axis = b.draw(st.integers(0, rank), label="axis")
        shape = [int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))]
        attrs = {"axis": axis}
    elif op == "Unsqueeze" or 1 not in x.shape:
        op, a = "Unsqueeze", b.draw(st.integers(0, rank), label="axis")
        shape = list(x.shape[:a]) + [1] + list(x.shape[a:])
        ins.append(b.init("k", np.asarray([a], np.int64)))
    else:
        a = x.shape.index(1)
        shape = [d for i, d in enumerate(x.shape) if i != a]
        ins.append(b.init("k", np.asarray([a], np.int64)))
    y = _float(b, op, ins, shape, x.lo, x.hi, **attrs)
    if b.draw(st.integers(0, 3), label="same_q") > 0:
        return b.requant(y, same=x)
    return _end(b, y, x, None)


# ------------------------------------------------------------------ QOperator nodes
def _maybe(b, zp: str) -> str:
    """An optional zero point input, now and then not given (0, whatever v's is)."""
    return zp if b.draw(st.integers(0, 4), label="zp_given") else ""


def _ins(b, v: Val):
    """A quantized operand as the QLinear operators take it: value, scale, zero point (always
    given: ONNX Runtime's type inference of com.microsoft's operators takes a tensor without
    one for uint8, and rejects an int8 one)."""
    return [v.name, v.q.names[0], b.zp_name(v.q)]


def _out(b, elem, shape, lo, hi, *, q: Quant | None = None) -> Val:
    """A QOperator node's quantized output for real values in [lo, hi]."""
    q = q or b.quant(elem, lo, hi)
    v = Val(b.fresh("v"), tuple(shape), elem, q, lo, hi)
    v.lo, v.hi = _clip_range(v, q)
    return v


def qlinear_conv(b: _Builder):
    """QLinearConv (w per output channel or per tensor, an int32 bias), or ConvInteger of
    uint8 x (zero points given or not)."""
    nd = b.draw(st.integers(1, 2), label="nd")
    x = b.pick(min_rank=nd + 2, max_rank=nd + 2)
    wshape, shape, attrs = _conv_shape(b, x.shape)
    integer = x.elem == U8 and b.draw(st.integers(0, 3), label="integer") == 0
    per_channel = not integer and b.draw(st.booleans(), label="per_channel")
    wname, w, wq = b.weight(wshape, _weight_elem(b, x.elem), axis=0 if per_channel else None)
    if integer:  # ONNX Runtime's ConvInteger: one zero point per tensor
        ins = [x.name, wname, _maybe(b, x.q.names[1]), wq.names[1]]
        return b.emit("ConvInteger", ins, Val(b.fresh("v"), shape, I32), Spec(I32, steps=0),
                      **attrs)
    mag = _accumulated(x.mag, _real(w, wq).reshape(wshape[0], -1), 1)
    y = _out(b, x.elem, shape, -mag, mag)
    ins = _ins(b, x) + [wname, wq.names[0], b.zp_name(wq), *y.q.names]
    if b.draw(st.booleans(), label="bias"):
        ins.append(_bias(b, "bias", mag, _scale1(x) * wq.scale.reshape(-1), wshape[0]))
    return b.emit("QLinearConv", ins, y, Spec(x.elem), **attrs)


def qlinear_matmul(b: _Builder):
    """QLinearMatMul (b a constant per column or per tensor, or an activation), MatMulInteger
    (zero points per tensor, b's per column; to int32, or on to float as quantize_dynamic
    writes it), or com.microsoft's QGemm."""
    kind = b.draw(st.sampled_from(["QLinearMatMul", "MatMulInteger", "QGemm"]), label="op")
    gemm = kind == "QGemm"
    a = b.pick(min_rank=2 if gemm else 1, max_rank=2 if gemm else 3)
    k, n = a.shape[-1], b.draw(st.integers(1, 5), label="n")
    if gemm:
        return _qgemm(b, a, n)
    if b.draw(st.integers(0, 2), label="activations") == 0:
        c = b.pick(shape=a.shape[:-2] + (k, n), elems=(U8, I8) if WIDE_PRODUCTS and a.elem == U8
                   else (a.elem,))
        bname, bq, mag = c.name, c.q, float(np.sqrt(k)) * a.mag * c.mag
    else:
        per_column = b.draw(st.booleans(), label="per_column")
        bname, w, bq = b.weight((k, n), _weight_elem(b, a.elem), axis=1 if per_column else None)
        mag = _accumulated(a.mag, _real(w, bq), 0)
    shape = a.shape[:-1] + (n,)
    if kind == "MatMulInteger":
        ins = [a.name, bname, _maybe(b, a.q.names[1]), bq.names[1]]
        acc = b.emit(kind, ins, Val(b.fresh("v"), shape, I32), Spec(I32, steps=0))
        if (bq.per_tensor or bq.axis == 1) and b.draw(st.booleans(), label="to_float"):
            scale = b.init("ss", np.float32(_scale1(a) * bq.scale))
            return _to_float(b, acc, scale, _along(_scale1(a) * bq.scale, len(shape) - 1,
                                                   len(shape)))
        return acc
    y = _out(b, a.elem, shape, -mag, mag)
    ins = _ins(b, a) + [bname, bq.names[0], b.zp_name(bq), y.q.names[0],
                                 b.zp_name(y.q)]
    return b.emit("QLinearMatMul", ins, y, Spec(a.elem))


def _to_float(b, acc: Val, scale: str, unit, bias=None) -> Val:
    """Cast(acc) * scale (+ bias): an integer product's float result, within one step of its
    scale (unit)."""
    f = _float(b, "Cast", [acc.name], acc.shape, to=F)
    y = _float(b, "Mul", [f.name, scale], acc.shape)
    if bias is not None:
        y = _float(b, "Add", [y.name, bias], acc.shape)
    return b.made(y, Spec(F, unit))


def _qgemm(b, a: Val, n):
    """com.microsoft QGemm: transA / transB, alpha, an int32 C, to y_scale or to float."""
    m, k = a.shape
    ta, tb = b.draw(st.booleans(), label="transA"), b.draw(st.booleans(), label="transB")
    if ta:
        k, m = m, k
    per_column = b.draw(st.booleans(), label="per_column")
    wshape = (n, k) if tb else (k, n)
    wname, w, wq = b.weight(wshape, _weight_elem(b, a.elem),
                            axis=(0 if tb else 1) if per_column else None)
    alpha = b.draw(st.sampled_from([1.0, 1.0, 0.5, 2.0]), label="alpha")
    mag = alpha * _accumulated(a.mag, _real(w, wq), 1 if tb else 0)
    ins = _ins(b, a) + [wname, wq.names[0], b.zp_name(wq)]
    cscale = (_scale1(a) * wq.scale.reshape(-1)).astype(np.float32)
    ins.append(_bias(b, "c", mag / alpha, cscale, n) if b.draw(st.booleans(), label="c")
               else "")
    attrs = {"transA": int(ta), "transB": int(tb), "alpha": alpha}
    if b.draw(st.booleans(), label="float_out"):
        y = Val(b.fresh("v"), (m, n), F, lo=-mag, hi=mag)
        return b.emit("ms.QGemm", ins, y, Spec(F, _along(np.float32(alpha) * cscale, 1, 2)),
                      **attrs)
    y = _out(b, a.elem, (m, n), -mag, mag)
    return b.emit("ms.QGemm", ins + [y.q.names[0], b.zp_name(y.q)], y, Spec(a.elem), **attrs)


def qlinear_binary(b: _Builder):
    """com.microsoft QLinearAdd / QLinearMul of two quantized values (broadcasting)."""
    op = b.draw(st.sampled_from(["QLinearAdd", "QLinearMul"]), label="op")
    a = b.pick()
    c = _partner(b, a, (a.elem,))
    if b.draw(st.booleans(), label="swap"):
        a, c = c, a
    y = _out(b, a.elem, np.broadcast_shapes(a.shape, c.shape), *_product_range(a, c, op))
    ins = _ins(b, a) + _ins(b, c) + list(y.q.names)
    return b.emit("ms." + op, ins, y, Spec(a.elem))


def qlinear_unary(b: _Builder):
    """com.microsoft QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax (opset 13 on any axis,
    opset 12 on the last one)."""
    op = b.draw(st.sampled_from(["QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax"]),
                label="op")
    x = b.pick()
    attrs, (lo, hi) = {}, (0.0, 1.0)
    if op == "QLinearLeakyRelu":
        attrs["alpha"] = b.draw(st.sampled_from([0.01, 0.1, 0.3]), label="alpha")
        lo, hi = x.lo * attrs["alpha"], x.hi
    if op == "QLinearSoftmax":
        opset = b.draw(st.sampled_from([13, 13, 12]), label="softmax_opset")
        axis = b.draw(st.integers(-len(x.shape), len(x.shape) - 1), label="axis") \
            if opset == 13 else -1
        attrs.update(opset=opset, axis=axis)
    fixed = op != "QLinearLeakyRelu" and b.draw(st.booleans(), label="fixed")
    y = _out(b, x.elem, x.shape, lo, hi, q=_probabilities(b, x.elem) if fixed else None)
    ins = _ins(b, x) + [y.q.names[0], b.zp_name(y.q) if op == "QLinearSoftmax"
                        else y.q.names[1]]
    return b.emit("ms." + op, ins, y, Spec(x.elem, off=TRANSCENDENTAL), **attrs)


def qlinear_pool(b: _Builder):
    """com.microsoft QLinearAveragePool and QLinearGlobalAveragePool, NCHW or channels
    last."""
    glob = b.draw(st.booleans(), label="global")
    last = b.draw(st.integers(0, 2), label="channels_last") == 0
    x = b.pick(min_rank=3, max_rank=4)
    nchw = (x.shape[0], x.shape[-1]) + x.shape[1:-1] if last else x.shape
    attrs = {"channels_last": int(last)}
    if glob:
        op, shape = "QLinearGlobalAveragePool", nchw[:2] + (1,) * (len(nchw) - 2)
    else:
        pattrs, shape = _pool_attrs(b, nchw)
        attrs.update(pattrs, count_include_pad=int(b.draw(st.booleans(), label="include_pad")))
        op = "QLinearAveragePool"
    if last:
        shape = (shape[0],) + shape[2:] + (shape[1],)
    y = _out(b, x.elem, shape, x.lo, x.hi,
             q=None if b.draw(st.integers(0, 3), label="new_q") else x.q)
    ins = _ins(b, x) + [y.q.names[0], b.zp_name(y.q)]
    return b.emit("ms." + op, ins, y, Spec(x.elem), **attrs)


def qlinear_concat(b: _Builder):
    """com.microsoft QLinearConcat of 2-3 inputs, each in its own scale and zero point or in
    the output's."""
    parts, axis, shape, lo, hi = _concat_parts(b, b.pick())
    x = parts[0]
    y = _out(b, x.elem, shape, lo, hi, q=x.q if b.draw(st.booleans(), label="same_q") else None)
    ins = [y.q.names[0], b.zp_name(y.q)]
    for p in parts:
        ins += _ins(b, p)
    return b.emit("ms.QLinearConcat", ins, y, Spec(x.elem), axis=axis)


# ------------------------------------------------------------------ quantize_dynamic
def dynamic(b: _Builder):
    """DynamicQuantizeLinear -> MatMulInteger / ConvInteger with a constant weight -> Cast ->
    Mul by x_scale * w_scale (-> Add of a float bias), as quantize_dynamic writes them; or
    DynamicQuantizeLinear's three outputs themselves."""
    conv = b.draw(st.integers(0, 2), label="conv") == 0
    nd = b.draw(st.integers(1, 2), label="nd")
    x = b.pick_float(min_rank=nd + 2 if conv else 1, max_rank=nd + 2 if conv else 3)
    if x.made:  # its scale is computed from x: the comparison needs ONNX Runtime's x
        b.needs.add(x.name)
    qx, sx, zx = b.fresh("v"), b.fresh("v"), b.fresh("v")
    b.node("DynamicQuantizeLinear", [x.name], [qx, sx, zx])
    if b.draw(st.integers(0, 4), label="alone") == 0:
        b.made(Val(qx, x.shape, U8), Spec(U8))
        b.made(Val(sx, (), F), Spec(F, ("dql", x.name, 1e-6)))
        return b.made(Val(zx, (), U8), Spec(U8, steps=0))
    welem = b.draw(st.sampled_from([I8, U8]), label="w_elem")
    per_channel = b.draw(st.booleans(), label="per_channel")
    if conv:  # ConvInteger: one zero point per tensor, the scales per output channel or not
        wshape, shape, attrs = _conv_shape(b, x.shape)
        wname, _, wq = b.weight(wshape, welem)
        if per_channel:
            wq.scale = (10.0 ** b.rng().uniform(-3, -1, wshape[0])).astype(np.float32)
        axis, op, bias_shape = 1, "ConvInteger", (wshape[0],) + (1,) * nd
        wscale = _along(wq.scale, 1, len(shape), keep=True) if per_channel else wq.scale
    else:  # the scales as quantize_dynamic writes them: one, or a vector of one per column
        n = b.draw(st.integers(1, 5), label="n")
        wname, _, wq = b.weight((x.shape[-1], n), welem, axis=1 if per_channel else None)
        shape, attrs = x.shape[:-1] + (n,), {}
        axis, op, bias_shape, wscale = len(shape) - 1, "MatMulInteger", (n,), wq.scale
    acc = Val(b.fresh("v"), shape, I32)
    b.node(op, [qx, wname, zx, wq.names[1]], [acc.name], **attrs)
    scale = _float(b, "Mul", [sx, b.init("ws", wscale)], ())
    bias = b.init("bias", b.rng().uniform(-1, 1, bias_shape).astype(np.float32)) \
        if b.draw(st.booleans(), label="bias") else None
    return _to_float(b, acc, scale.name, ("dql", x.name, _along(wq.scale, axis, len(shape))),
                     bias)


# ------------------------------------------------------------------ what looptune refuses
def refused(b: _Builder):
    """Forms that ONNX Runtime runs and looptune refuses, whose refusal must name the node
    and say why: QLinearSoftmax of opset 12 over more than the last axis, 3-D average
    pooling, blocked DequantizeLinear (opset 21)."""
    kind = b.draw(st.sampled_from(["softmax12", "pool3d", "blocked"]), label="refused")
    if kind == "softmax12":
        x = b.pick(min_rank=3, max_rank=4)
        y = _out(b, x.elem, x.shape, 0.0, 1.0, q=_probabilities(b, x.elem))
        return b.emit("ms.QLinearSoftmax", _ins(b, x) + [y.q.names[0], b.zp_name(y.q)], y,
                      Spec(x.elem), opset=12, axis=1)
    if kind == "pool3d":
        x = b.pick(shape=(1, 2, 3, 2, 3))
        y = _out(b, x.elem, (1, 2, 2, 1, 2), x.lo, x.hi)
        return b.emit("ms.QLinearAveragePool", _ins(b, x) + [y.q.names[0], b.zp_name(y.q)], y,
                      Spec(x.elem), kernel_shape=[2, 2, 2], channels_last=0)
    if b.opset < 21:
        return None
    n = b.draw(st.integers(1, 3), label="n")
    x = b.pick(shape=(4, n), elems=(I8,))
    scale = (10.0 ** b.rng().uniform(-3, -1, (2, n))).astype(np.float32)
    out = Val(b.fresh("d"), (4, n), F)
    return b.emit("DequantizeLinear", [x.name, b.init("ws", scale)], out,
                  Spec(F, float(scale.max())), axis=0, block_size=2)


GROUPS = [quantize, dequantize, qdq_conv, qdq_conv, qdq_matmul, qdq_matmul, qdq_gemm,
          qdq_binary, qdq_binary, qdq_pool, qdq_pool, qdq_unary, qdq_unary, qdq_unary,
          qdq_concat, qdq_movement, qlinear_conv, qlinear_matmul, qlinear_matmul,
          qlinear_binary, qlinear_unary, qlinear_pool, qlinear_pool, qlinear_concat, dynamic]


@st.composite
def quant_cases(draw, max_groups: int = 5) -> Case:
    """A random quantized model of 1 to max_groups groups and the feeds to run it on."""
    b = _Builder(draw, draw(st.sampled_from([13, 17, 19, 21]), label="opset"))
    for _ in range(draw(st.integers(1, max_groups), label="groups")):
        # a refused graph compares nothing: rare (30, not a bound, which hypothesis favours)
        rare = draw(st.integers(0, 59), label="refused") == 30
        (refused if rare else draw(st.sampled_from(GROUPS), label="group"))(b)
    return b.model()
