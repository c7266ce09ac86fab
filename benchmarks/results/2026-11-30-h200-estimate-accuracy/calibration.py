"""Calibration: cuBLAS workspaces and SDPA flags. Each case in a fresh process."""
import os
import subprocess
import sys
import threading

import torch
import torch.nn.functional as F


def active_blocks():
    sizes = []
    for seg in torch.cuda.memory_snapshot():
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                sizes.append(b["size"])
    return sorted(sizes, reverse=True)

def handle():
    f = getattr(torch._C, "_cuda_getCurrentBlasHandle", None)
    return None if f is None else f()

def report(tag, tensors):
    torch.cuda.synchronize()
    own = sum(t.untyped_storage().nbytes() for t in tensors)
    alloc = torch.cuda.memory_allocated()
    print(f"  {tag}: allocated={alloc} own={own} extra={alloc - own} ({(alloc - own)/2**20:.3f} MiB)"
          f" reserved={torch.cuda.memory_reserved()} active_blocks={active_blocks()}", flush=True)

def case(name):
    d = "cuda"
    torch.cuda.init()
    print(f"[{name}] thread={threading.get_ident()} (handles are read only after the measurements: "
          "getting one creates it and its workspace)", flush=True)
    if name == "a_fp32_mm":
        a = torch.randn(1024, 1024, device=d); b = torch.randn(1024, 1024, device=d)
        report("before mm", [a, b])
        c = torch.mm(a, b)
        report("after mm", [a, b, c])
        c2 = torch.mm(a, b)
        report("after a 2nd mm", [a, b, c, c2])
        print(f"  main-thread handle={handle()}")
    elif name == "b_bf16_linear_bias":
        x = torch.randn(64, 1024, device=d, dtype=torch.bfloat16)
        w = torch.randn(1024, 1024, device=d, dtype=torch.bfloat16)
        bias = torch.randn(1024, device=d, dtype=torch.bfloat16)
        report("before linear", [x, w, bias])
        y = F.linear(x, w, bias)
        report("after linear", [x, w, bias, y])
        print(f"  main-thread handle={handle()}")
    elif name == "c_linear_backward":
        x = torch.randn(64, 1024, device=d)
        w = torch.randn(1024, 1024, device=d, requires_grad=True)
        bias = torch.randn(1024, device=d, requires_grad=True)
        y = F.linear(x, w, bias)
        report("after forward", [x, w, bias, y])
        y.sum().backward()
        report("after backward", [x, w, bias, y, w.grad, bias.grad])
        z = torch.mm(x, w.detach())
        report("after main-thread mm post-backward", [x, w, bias, y, w.grad, bias.grad, z])
        seen = {}
        def hook(g):
            seen["thread"] = threading.get_ident(); seen["handle"] = handle()
            return g
        y2 = F.linear(x, w, bias)
        y2.register_hook(hook)
        y2.sum().backward()
        main_handle = handle()
        print(f"  main thread={threading.get_ident()} handle={main_handle}; autograd hook thread="
              f"{seen.get('thread')} handle={seen.get('handle')}")

if len(sys.argv) > 1:
    case(sys.argv[1]); sys.exit(0)

print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("device", torch.cuda.get_device_name(), torch.cuda.get_device_capability())
print("CUBLAS_WORKSPACE_CONFIG", os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
      "CUBLASLT_WORKSPACE_SIZE", os.environ.get("CUBLASLT_WORKSPACE_SIZE"))
bc = torch.backends.cuda
for f in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled",
          "is_flash_attention_available"):
    fn = getattr(bc, f, None)
    print(f"torch.backends.cuda.{f}()", None if fn is None else fn())
try:
    print("preferred_blas_library", bc.preferred_blas_library())
except Exception as e:
    print("preferred_blas_library err", e)
print("matmul.allow_tf32", bc.matmul.allow_tf32, "cudnn.allow_tf32", torch.backends.cudnn.allow_tf32)
print("has torch._C._cuda_getCurrentBlasHandle:", hasattr(torch._C, "_cuda_getCurrentBlasHandle"))
for n in ("a_fp32_mm", "b_bf16_linear_bias", "c_linear_backward"):
    r = subprocess.run([sys.executable, __file__, n], capture_output=True, text=True)
    print(r.stdout + (("STDERR " + r.stderr[-1500:]) if r.returncode else ""), flush=True)
