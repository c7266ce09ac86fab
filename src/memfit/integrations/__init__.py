"""memfit in the training frameworks: Lightning and the Hugging Face ``Trainer``.

Each module imports its framework when imported, and raises :class:`memfit.MissingExtraError`
with the install command when it is missing:

* ``memfit.integrations.lightning``: ``MemfitCallback`` (OOM reports, leak detector, the guard's
  incidents in the logs) and ``lightning_guard`` (``AutoMicrobatch`` in a manual-optimization
  ``training_step``); ``pip install 'memfit[lightning]'``.
* ``memfit.integrations.hf``: ``MemfitTrainerCallback`` (OOM reports, leak detector) and
  ``AutoMicrobatchTrainer`` / ``AutoMicrobatchMixin`` (the Trainer's ``training_step`` guarded);
  ``pip install 'memfit[hf]'``.

The guard runs in one process in both: under several processes (DDP), the frameworks run the
gradient all-reduce inside each backward pass, where a rank that runs out of memory would leave
the others waiting. Use ``memfit.AutoMicrobatch`` directly with a DDP model for that.
"""

__all__: list[str] = []
