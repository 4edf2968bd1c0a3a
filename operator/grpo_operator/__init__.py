"""grpo-operator: runs GRPO fine-tuning of language models as the `GRPORun` custom resource.

`grpo_operator.api` is the contract (pure pydantic, shared with the trainer); the rest of the
package is the kopf application.
"""
