"""The version of the contract between the operator and the trainer image, and who refuses
whom.

The contract is everything the two exchange: the run config (``run_config``), the report
(``report``), the exit codes, the checkpoint layout and the digests. Its version is
``MAJOR.MINOR``; the run config carries the operator's (``contractVersion``), every report the
trainer's. A document without one is of contract 1.0, from before versions.

Compatibility, for an operator of version ``1.o`` and an image of version ``1.i``:

- Different majors never work together: either side refuses the other.
- ``i <= o`` (an older or equal image): the operator writes the spec into the run config
  without the fields left at their defaults, so an older image parses it strictly as long as
  the run uses nothing newer than the image. A run that does (a field the image does not
  know) is refused by the image before it starts: exit 18, IncompatibleTrainer, the driver log
  naming the field.
- ``i > o`` (an image newer than the operator): refused by the operator on the image's first
  report (its reports may carry what this operator cannot read): the run fails
  IncompatibleTrainer, with a Warning Event, and its driver is stopped.

Neither refusal consumes a restart. Within a major, a minor only adds optional fields;
removing or renaming a field, or changing a default, takes a new major.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from grpo_operator.api.base import StrictStr

VERSION_PATTERN = r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$"
VERSION_KEY = "contractVersion"
ContractVersionText = Annotated[StrictStr, Field(pattern=VERSION_PATTERN, max_length=9)]

HISTORY = {
    "1.0": "run config and report schemaVersion 1, before contract versions",
    "1.1": "contractVersion in the run config and reports; spec.learner, algorithm.weightDecay, "
           "adamBeta1, adamBeta2, evalSamples, evalMaxPrompts, advantageEstimator, "
           "advantageStdScope, policyLoss, maskTruncatedCompletions, overlongBufferTokens, "
           "overlongPenaltyFactor, clipRatioHigh up to 10; evaluation figures and "
           "tokens in the report's ledger; lastStep.seconds.eval; exit code 18",
    "1.2": "algorithm.rolloutCorrection, entropyCoef, topK; lastStep.mismatchKl, "
           "importanceWeightMean, effectiveSampleSize, correctionOutsideFraction; reward python "
           "and http (reward.python, http, timeoutSeconds, concurrency; paths.rewardFile; "
           "inputs.reward); lastStep.rewardErrors, rewardTimeouts, rewardInvalid; "
           "algorithm.dynamicSampling; lastStep.generationRounds, filteredGroups, "
           "shortfallGroups",
}


@dataclass(frozen=True, order=True)
class ContractVersion:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> ContractVersion:
        match = re.fullmatch(VERSION_PATTERN, text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"contract version must be MAJOR.MINOR, got {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


CONTRACT_VERSION = ContractVersion.parse(max(HISTORY, key=ContractVersion.parse))
"""This code's version: the operator's and the image's, built from the same tree."""
UNVERSIONED = ContractVersion(1, 0)


def peek_version(document: str | bytes) -> ContractVersion:
    """The ``contractVersion`` of a JSON document, read before the document is validated (a
    newer one may not validate here); 1.0 when absent. ValueError when it cannot be read."""
    try:
        doc = json.loads(document)
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if VERSION_KEY not in doc:
        return UNVERSIONED
    return ContractVersion.parse(doc[VERSION_KEY])


def image_refuses(config: ContractVersion, image: ContractVersion = CONTRACT_VERSION,
                  problem: str | None = None) -> str | None:
    """Why an image refuses a run config of version ``config`` (None: it runs it).
    ``problem``: what strict parsing found wrong with it, if anything."""
    if config.major != image.major:
        return (f"the run config is of contract {config}, this trainer image speaks {image}: "
                "use an image of the operator's major version")
    if problem is not None and config > image:
        return (f"the run config (contract {config}) uses what this trainer image (contract "
                f"{image}) does not know: {problem}; use an image of contract {config} or newer")
    return None


def operator_refuses(image: ContractVersion,
                     operator: ContractVersion = CONTRACT_VERSION) -> str | None:
    """Why the operator refuses a trainer image that announced version ``image`` (None: it
    works with it)."""
    if image.major != operator.major or image > operator:
        return (f"the trainer image speaks contract {image}, this operator {operator}: use an "
                f"image of contract {operator.major}.x up to {operator}, or upgrade the operator")
    return None
