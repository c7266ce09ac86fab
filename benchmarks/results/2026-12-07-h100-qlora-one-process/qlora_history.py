"""QLoRA measured in a fresh process and after an estimate in the same process, each with its
allocator history: what the first run has that the second does not."""
import gzip, json, pickle, sys, os
from pathlib import Path
import torch
import transformers
import memfit
from memfit.estimator._measure import measure
from memfit.estimator import estimate_workload
from memfit.workload import make_workload

out = Path(os.environ["OUT"])
folder = Path("/tmp/qllama"); folder.mkdir(exist_ok=True)
transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                         num_attention_heads=16, num_key_value_heads=4).save_pretrained(folder)
model = f"hf:{folder}/config.json"
first = sys.argv[1]
w = make_workload(model, batch_size=4, seq_len=512, precision="bf16", techniques={"quantize": "nf4", "lora": 16},
                  gpu=memfit.resolve_gpu("h100"))
row = {"order": first}
if first == "estimate-first":
    e = estimate_workload(w)
    row["estimate"] = [e.peak_allocated, e.peak_reserved]
m, snap = measure(w, record_history=True)
row["measured"] = [m.peak_allocated, m.peak_reserved, m.setup_allocated]
if first == "measure-first":
    e = estimate_workload(w)
    row["estimate"] = [e.peak_allocated, e.peak_reserved]
with gzip.open(out / f"qlora-{first}.pickle.gz", "wb") as f:
    pickle.dump(snap, f)
print("RESULT", json.dumps(row))
