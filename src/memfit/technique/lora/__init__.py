"""LoRA fine-tuning (``lora``): the model's chosen linear layers get low-rank adapters through
PEFT's own ``get_peft_model`` (run on the trace's fake tensors as on a GPU), and only the
adapters are trained: the base weights keep no gradients and no optimizer states, and autograd
saves less for layers whose weights need no gradient.

``techniques={"lora": 16}`` (``--lora 16``) adapts PEFT's default target modules for the
model's architecture at rank 16; ``techniques={"lora": peft.LoraConfig(...)}`` takes the
user's own configuration as it is. It changes what is trained, so the planner never adds it.
"""

from memfit.technique.lora._technique import TECHNIQUE, Lora

__all__ = ["TECHNIQUE", "Lora"]
