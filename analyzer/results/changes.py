"""A change of a pool's split as the summary reports it: what the model predicted then, what followed."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal[
    "paid off as predicted",
    "paid off more than predicted",
    "paid off in part",
    "did not pay off",
    "made things worse",
    "no gain predicted, none seen",
    "too early to tell",
    "not measurable yet",
    "not comparable",
    "not carried out",
]
Figure = Annotated[float | None, Field(description="Null where not estimated.")]


class MovedWorker(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    worker_id: str
    from_role: str
    to_role: str
    from_sku: str | None = Field(default=None, description="The GPU model it left; null: it kept its GPUs.")
    to_sku: str | None = None
    new_worker_id: str | None = Field(
        default=None,
        description="The worker that replaced it on the same GPU group in its new role (a Deployment "
        "rollout: old pods gone, new pods in their place); null: it changed role under its own id.",
    )


class ChangeOutcome(BaseModel):
    """One change of the pool's prefill/decode split in the range (or a recommendation left standing):
    the gain the model predicted for the split adopted, at the traffic mix before the change, against the
    capacity the pool showed afterwards at that same mix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: str = Field(
        description="RFC 3339 in UTC: when the change took effect (or the recommendation stood from)."
    )
    moved: list[MovedWorker]
    followed: str = Field(description="How the change relates to the recommendation open before it.")
    verdict: Verdict
    reason: str
    predicted_tokens_per_s: Figure = Field(
        default=None, description="Prompt + output tokens/s the model predicted."
    )
    predicted_tokens_per_s_low: Figure = None
    predicted_tokens_per_s_high: Figure = None
    recommended_tokens_per_s: Figure = Field(
        default=None, description="What the whole recommendation open before the change would have gained."
    )
    realized_tokens_per_s: Figure = Field(
        default=None, description="Capacity after minus before, both at the traffic mix before the change."
    )
    predicted_output_tokens_per_s: Figure = None
    realized_output_tokens_per_s: Figure = None
    predicted_requests_per_s: Figure = None
    realized_requests_per_s: Figure = None
    delivered_output_tokens_per_s_before: Figure = Field(
        default=None, description="Output tokens/s served before: follows demand in a demand-limited pool."
    )
    delivered_output_tokens_per_s_after: Figure = None
    hours_after: float = Field(description="Hours of traffic seen since the change.")
    realized_to_predicted: Figure = Field(
        default=None, description="Realized over predicted gain, for a scored change."
    )
