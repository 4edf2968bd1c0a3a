"""The driver: submits one attempt's trainer to the RayCluster through the Ray Jobs API,
follows it and exits with the trainer's code (``python -m grpo_trainer submit``).

The driver pod is neither a Ray node nor the head, so it may not run a Ray driver itself; it
talks to the head's Jobs API over HTTP. See ``docs/driver.md``.

This package's ``__init__`` and ``settings`` import nothing heavy (no Ray), so the operator's
builders can import ``grpo_trainer.driver.settings`` for the constants they must agree on.
"""
