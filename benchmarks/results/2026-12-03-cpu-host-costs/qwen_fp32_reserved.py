import memfit
cases=[(dict(batch_size=2, accumulation=4, precision="fp32", activation_checkpointing=0.75, optimizer="adamw-forloop"), 10821321216, 11714691072),
       (dict(batch_size=2, accumulation=4, precision="fp32", activation_checkpointing=True, optimizer="adamw"), 9983220736, 12756975616),
       (dict(batch_size=2, accumulation=4, precision="fp32", activation_checkpointing=True, optimizer="adamw-fused"), 9962325504, 11167334400),
       (dict(batch_size=2, accumulation=4, precision="fp32", activation_checkpointing=False, optimizer="adamw"), 13427847680, 14071889920),
       (dict(batch_size=1, accumulation=8, precision="fp32", activation_checkpointing=False, optimizer="adamw-fused"), 10725260800, 11762925568)]
for kw, a, r in cases:
    e=memfit.estimate("qwen2.5-0.5b", gpu="h200", seq_len=512, **kw)
    print(kw, f"alloc {100*(e.peak_allocated/a-1):+.2f}% res {100*(e.peak_reserved/r-1):+.2f}%", e.peak_allocated, e.peak_reserved, flush=True)
