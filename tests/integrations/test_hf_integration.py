"""The Hugging Face integration: AutoMicrobatchTrainer, with out-of-memory errors injected, ends
with the parameters of the plain Trainer, with gradient accumulation, for a loss normalised by
the Trainer's token count (GPT-2), one that takes the count but averages by sample (BERT
classification) and one the Trainer divides by the accumulation steps (a model of one's own)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from memfit.runtime import InjectOOM

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
hf = pytest.importorskip("memfit.integrations.hf")


def gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=64,
        n_positions=32,
        n_embd=16,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config).double()


def bert() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertForSequenceClassification(config).double()


class Tagger(torch.nn.Module):
    """A model of one's own: no ``**kwargs``, so the Trainer divides its loss by the steps."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 8, dtype=torch.float64)
        self.head = torch.nn.Linear(8, 2, dtype=torch.float64)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.head(self.embed(input_ids).mean(1))
        return {"loss": torch.nn.functional.cross_entropy(logits, labels)}


MODELS = {"gpt2": gpt2, "bert": bert, "tagger": Tagger}


def dataset(kind: str) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(9)
    rows = []
    for _ in range(32):
        ids = torch.randint(64, (12,), generator=g)
        label = ids if kind == "gpt2" else torch.randint(2, (), generator=g)
        rows.append({"input_ids": ids, "labels": label})
    return rows


def train(model: torch.nn.Module, kind: str, trainer_cls: Any, tmp: Any, **extra: Any) -> Any:
    args = transformers.TrainingArguments(
        output_dir=str(tmp),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        max_steps=2,
        learning_rate=1e-2,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = trainer_cls(model=model, args=args, train_dataset=dataset(kind), **extra)
    trainer.train()
    return trainer


@pytest.mark.parametrize("kind", ["gpt2", "bert", "tagger"])
def test_guarded_trainer_matches_the_plain_trainer(tmp_path, kind):
    reference = MODELS[kind]()
    train(reference, kind, transformers.Trainer, tmp_path / "ref")
    model = MODELS[kind]()
    callback = hf.MemfitTrainerCallback(oom_dir=tmp_path / "oom", leak_detector=False)
    with InjectOOM(model, max_samples=3, phase="backward") as oom:
        trainer = train(
            model,
            kind,
            hf.AutoMicrobatchTrainer,
            tmp_path / "guarded",
            callbacks=[callback],
            memfit_options={"grow_after": None},
        )
    assert oom.raised
    guard = trainer.memfit_guard
    assert guard.microbatch_size == 2  # 8 -> 4 -> 2
    assert callback.guard is guard and callback.services.oom is None
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12, msg=name)
