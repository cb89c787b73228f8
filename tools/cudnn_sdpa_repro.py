"""PyTorch's own use of cuDNN's fused attention, for compute-sanitizer.

weft's attention tests report racecheck hazards and synccheck barrier errors inside cuDNN's
generated SDPA backward kernel (cudnn_generated_fort_native_sdpa_sm90_flash_bprop_*). This runs
the same shape through torch.nn.functional.scaled_dot_product_attention with only cuDNN's backend
allowed, so the same sanitizer tools can be pointed at PyTorch:

  compute-sanitizer --tool racecheck python3 tools/cudnn_sdpa_repro.py
  compute-sanitizer --tool synccheck python3 tools/cudnn_sdpa_repro.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
q, k, v = (torch.randn(2, 2, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
           for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=False)
    out.backward(torch.randn_like(out))
torch.cuda.synchronize()
print("cuDNN", torch.backends.cudnn.version(), "SDPA fwd+bwd B2 H2 T64 D64 bfloat16 ran; grad norm",
      float(q.grad.float().norm()))
