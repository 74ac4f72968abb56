"""The operator library: te operators, their numpy references (`reference`) and the registry
of named workloads with realistic default shapes (`workload("conv2d", H=28)`)."""
from . import reference
from .elementwise import add, broadcast_shape, gelu, multiply, relu
from .linalg import batch_matmul, dense, matmul, matmul_add
from .nn import avg_pool2d, conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw, max_pool2d, pad
from .norm import layer_norm, log_softmax, rms_norm, softmax
from .reduction import reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_sum
from .registry import OPS, OpDef, get_op, register_op, workload
from . import workloads as _workloads  # noqa: F401  (registers the built-in workloads)

__all__ = [
    "OPS", "OpDef", "add", "avg_pool2d", "batch_matmul", "broadcast_shape", "conv2d_nchw",
    "conv2d_nhwc", "dense", "depthwise_conv2d_nchw", "gelu", "get_op", "layer_norm",
    "log_softmax", "matmul", "matmul_add", "max_pool2d", "multiply", "pad", "reduce_max",
    "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum", "reference", "register_op", "relu",
    "rms_norm", "softmax", "workload",
]
