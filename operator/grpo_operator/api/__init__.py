"""The GRPORun contract, shared by the operator and the trainer (pure pydantic).

Modules: `constants` (names, phases, conditions, reasons), `spec` / `status` (the resource),
`run_config` (what the trainer is told), `report` (what the trainer tells back), `exit_codes`,
`digest` (digest manifests of frozen inputs and checkpoints), `checkpoint_layout`, and `crd` /
`docs` / `generate` (the generated CRD and API reference).
"""
