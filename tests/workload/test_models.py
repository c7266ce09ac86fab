import pytest
import torch

from memfit import InvalidInputError, UnknownModelError
from memfit.workload._models import resolve_model


def test_catalog_alias_resolves():
    assert resolve_model("bert-base").name == "bert-base-uncased"
    assert resolve_model("TinyLlama").task == "causal-lm"


def test_unknown_name_suggests_close_matches():
    with pytest.raises(UnknownModelError, match=r"Did you mean: .*gpt2") as info:
        resolve_model("gtp2")
    assert "gpt2" in info.value.close_matches


def test_unknown_torchvision_name():
    pytest.importorskip("torchvision")
    with pytest.raises(UnknownModelError, match="tv:resnet50"):
        resolve_model("tv:resnet5O")


def test_user_factory_file_with_batch_and_loss(tmp_path):
    src = tmp_path / "net.py"
    src.write_text(
        "import torch\n"
        "def make_model():\n    return torch.nn.Linear(8, 2)\n"
        "def make_batch(batch_size, seq_len):\n    return torch.randn(batch_size, 8)\n"
    )
    recipe = resolve_model(f"{src}:make_model")
    assert recipe.make_batch is not None
    assert recipe.make_batch(3, None).shape == (3, 8)


def test_missing_file_and_missing_attribute(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        resolve_model(f"{tmp_path}/nope.py:make")
    src = tmp_path / "m.py"
    src.write_text("x = 1\n")
    with pytest.raises(InvalidInputError, match="no callable 'make'"):
        resolve_model(f"{src}:make")


def test_hf_config_file(tmp_path):
    pytest.importorskip("transformers")
    cfg = tmp_path / "config.json"
    cfg.write_text(
        '{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, '
        '"architectures": ["GPT2LMHeadModel"]}'
    )
    recipe = resolve_model(f"hf:{cfg}")
    assert recipe.task == "causal-lm"


def test_hf_config_without_model_type(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("{}")
    with pytest.raises(InvalidInputError, match="no 'model_type'"):
        resolve_model(f"hf:{cfg}")


def test_each_build_of_a_hugging_face_name_gets_its_own_config():
    # transformers keeps the config it is given: shared, a checkpointed build's use_cache=False
    # reached every later build, and the planner's candidates after a checkpointed one lost
    # GPT-2's KV cache (300 MB at 8 x 1024) from their estimates
    from memfit.workload import make_workload

    workload = make_workload("gpt2", batch_size=2, seq_len=64)
    first = workload.build_model()
    first.config.use_cache = False
    second = workload.build_model()
    assert second.config is not first.config
    assert second.config.use_cache is True


def test_auxiliary_classifiers_are_trained_with_the_main_one() -> None:
    from collections import namedtuple

    from torch import nn

    from memfit.workload._models import classification_loss

    outputs = namedtuple("Outputs", ["logits", "aux_logits"])

    class WithAux(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.main, self.aux = nn.Linear(8, 3), nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return outputs(self.main(x), self.aux(x))

    model = WithAux()
    classification_loss(model, (torch.randn(4, 8), torch.tensor([0, 1, 2, 0]))).backward()
    assert model.main.weight.grad is not None and model.aux.weight.grad is not None
