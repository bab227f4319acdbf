"""The name and dtype tables nvbridge.engine.costs.flops costs by: element sizes and peak precisions per
dtype name, the op families (matmul, convolution, attention, elementwise, reduction, softmax,
norm, copy, view), and ``base_name``, which maps a recorded op or backward node name onto them.
"""

from __future__ import annotations

import re

ASSUMED_DTYPE = "float32"
DTYPE_BYTES = {
    "float64": 8,
    "double": 8,
    "f64": 8,
    "float32": 4,
    "float": 4,
    "f32": 4,
    "tf32": 4,
    "float16": 2,
    "half": 2,
    "f16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "fp8": 1,
    "int64": 8,
    "long": 8,
    "i64": 8,
    "int32": 4,
    "int": 4,
    "i32": 4,
    "int16": 2,
    "i16": 2,
    "int8": 1,
    "i8": 1,
    "uint8": 1,
    "u8": 1,
    "bool": 1,
    "b8": 1,
    "complex64": 8,
    "c64": 8,
    "complex128": 16,
    "c128": 16,
}
# Short names for the precisions the GPU table lists (nvbridge.gpu.peaks.Peaks fields).
PRECISION = {
    "float64": "fp64",
    "double": "fp64",
    "f64": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tf32": "tf32",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "f8e4m3": "fp8",
    "f8e5m2": "fp8",
    "fp8": "fp8",
    "int8": "int8",
    "i8": "int8",
}

MATMUL_FWD = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_mm", "matmul", "linear"}
CONV_FWD = {
    "convolution",
    "_convolution",
    "convolution_overrideable",
    "cudnn_convolution",
    "_slow_conv2d_forward",
    "conv1d",
    "conv2d",
    "conv3d",
    "cudnn_convolution_transpose",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "mkldnn_convolution",
    # Backend convolutions torch dispatches to (nested in aten::convolution)
    "_convolution_mode",
    "thnn_conv2d",
    "slow_conv_dilated2d",
    "slow_conv_dilated3d",
    "slow_conv_transpose2d",
    "slow_conv_transpose3d",
    "_conv_depthwise2d",
    "conv_depthwise3d",
    "miopen_convolution",
    "miopen_convolution_transpose",
    "miopen_depthwise_convolution",
    "_nnpack_spatial_convolution",
    "cudnn_convolution_relu",
    "cudnn_convolution_add_relu",
}
# Every attention kernel torch's scaled_dot_product_attention dispatches to (flash, memory-efficient,
# cuDNN, CPU flash, other backends' fused kernel, MPS's math kernel), not the composite itself: it
# holds one of these, or, on the math path (_scaled_dot_product_attention_math, also composite),
# the bmm/baddbmm ops FlopCounterMode counts there.
SDPA_FWD = {
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_attention_math_for_mps",
    "_flash_attention_forward",
    "_efficient_attention_forward",
    "flex_attention",
}
SDPA_BWD = {
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_fused_attention_overrideable_backward",
    "_flash_attention_backward",
    "_efficient_attention_backward",
    "flex_attention_backward",
}
# FLOPs per output element (a convention: torch counts none of these).
ELEMENTWISE_FLOPS = dict.fromkeys(
    (
        "add",
        "sub",
        "rsub",
        "mul",
        "div",
        "neg",
        "abs",
        "relu",
        "threshold",
        "threshold_backward",
        "pow",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "sigmoid",
        "tanh",
        "gelu",
        "silu",
        "erf",
        "clamp",
        "clamp_min",
        "clamp_max",
        "maximum",
        "minimum",
        "where",
        "masked_fill",
        "leaky_relu",
        "hardtanh",
        "sin",
        "cos",
        "square",
        "lerp",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "dropout",
        "native_dropout",
        "sigmoid_backward",
        "tanh_backward",
        "gelu_backward",
        "silu_backward",
        "addcmul",
        "addcdiv",
        "fused_dropout",
        "_fused_dropout",
        "mish",
        "softplus",
        "hardswish",
        "elu",
    ),
    1,
)
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
REDUCE = {
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "prod",
    "norm",
    "var",
    "std",
    "argmax",
    "argmin",
    "logsumexp",
    "all",
    "any",
    "linalg_vector_norm",
}
# Per element of the input: max, subtract, exp, sum, divide (softmax); mean, variance,
# normalize, scale, shift (norms).
SOFTMAX = {"softmax": 5, "_softmax": 5, "log_softmax": 5, "_log_softmax": 5}
NORM = {
    "layer_norm": 5,
    "native_layer_norm": 5,
    "batch_norm": 5,
    "native_batch_norm": 5,
    "_batch_norm_impl_index": 5,
    "cudnn_batch_norm": 5,
    "group_norm": 5,
    "native_group_norm": 5,
    "rms_norm": 4,
    "_fused_rms_norm": 4,
}
COPY = {"copy_", "copy", "clone", "contiguous", "_to_copy", "to", "type_as", "float", "half", "bfloat16"}
VIEW = {
    "view",
    "_unsafe_view",
    "reshape",
    "t",
    "transpose",
    "permute",
    "unsqueeze",
    "squeeze",
    "expand",
    "as_strided",
    "slice",
    "select",
    "narrow",
    "chunk",
    "split",
    "detach",
    "alias",
    "unbind",
    "view_as",
    "expand_as",
    "flatten",
    "unflatten",
    "numpy_T",
    "lift_fresh",
    "split_with_sizes",
}
_BACKWARD_NODE = re.compile(r"^(?:torch::autograd::)?(?P<node>[A-Za-z]+?)Backwards?\d*$")
_NODE_FORWARD = {
    "Mm": "mm",
    "Addmm": "addmm",
    "Bmm": "bmm",
    "Baddbmm": "baddbmm",
    "Addbmm": "addbmm",
    "Convolution": "convolution",
    "ConvolutionBackward": "convolution",
    "ScaledDotProductEfficientAttention": "_scaled_dot_product_efficient_attention",
    "ScaledDotProductFlashAttention": "_scaled_dot_product_flash_attention",
    "ScaledDotProductCudnnAttention": "_scaled_dot_product_cudnn_attention",
    "ScaledDotProductFlashAttentionForCpu": "_scaled_dot_product_flash_attention_for_cpu",
    "ScaledDotProductFusedAttentionOverrideable": "_scaled_dot_product_fused_attention_overrideable",
}
_DUNDER = {
    "add": "add",
    "radd": "add",
    "iadd": "add",
    "sub": "sub",
    "rsub": "rsub",
    "isub": "sub",
    "mul": "mul",
    "rmul": "mul",
    "imul": "mul",
    "truediv": "div",
    "rtruediv": "div",
    "itruediv": "div",
    "div": "div",
    "matmul": "matmul",
    "rmatmul": "matmul",
    "pow": "pow",
    "neg": "neg",
}
_PREFIXES = ("autograd::engine::evaluate_function: ", "aten::", "torch.nn.functional.", "torch.", "Tensor.")


def base_name(op_name: str) -> tuple[str, bool]:
    """(torch's base op name, is a backward node): ``aten::add_`` -> add, ``Tensor.__iadd__`` ->
    add, ``AddmmBackward0`` -> (addmm, True), ``convolution_backward`` stays."""
    name = op_name
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
    node = _BACKWARD_NODE.match(name)
    if node and node.group("node") in _NODE_FORWARD:
        return _NODE_FORWARD[node.group("node")], True
    if node:
        return name, True
    if name.startswith("__") and name.endswith("__"):
        name = _DUNDER.get(name[2:-2], name)
    if name.endswith("_") and not name.endswith("__") and name != "copy_":
        name = name[:-1]
    return name, False
