"""A run's USD cap, shared by the fleet in Redis: spent and reserved (in flight) micro-dollars.
A call that would take spent + reserved past the cap is refused and the run is marked
exhausted; the producer then stops enqueuing and the run ends ``budget_exhausted``."""

from __future__ import annotations

from decimal import Decimal

import redis

from prism.llm import BudgetExhausted
from workers import keys

_MICRO = Decimal(1_000_000)


def _micro(usd: Decimal) -> int:
    return int((usd * _MICRO).to_integral_value(rounding="ROUND_CEILING"))


class RunBudget:
    def __init__(self, client: redis.Redis, run_id: str, cap_usd: Decimal):
        self.client, self.cap = client, _micro(cap_usd)
        self.spent_key, self.reserved_key = keys.budget_spent(run_id), keys.budget_reserved(run_id)
        self.flag_key = keys.budget_exhausted(run_id)

    def reserve(self, usd: Decimal) -> None:
        amount = _micro(usd)
        pipe = self.client.pipeline()
        pipe.incrby(self.reserved_key, amount)
        pipe.get(self.spent_key)
        pipe.expire(self.reserved_key, keys.BUDGET_TTL_S)
        reserved, spent, _ = pipe.execute()
        if int(spent or 0) + reserved > self.cap:
            self.client.decrby(self.reserved_key, amount)
            self.client.set(self.flag_key, 1, ex=keys.BUDGET_TTL_S)
            raise BudgetExhausted(f"run budget of ${Decimal(self.cap) / _MICRO} reached")

    def settle(self, reserved: Decimal, spent: Decimal | None) -> None:
        pipe = self.client.pipeline()
        pipe.decrby(self.reserved_key, _micro(reserved))
        pipe.incrby(self.spent_key, _micro(spent or Decimal(0)))
        pipe.expire(self.spent_key, keys.BUDGET_TTL_S)
        pipe.execute()

    def reopen(self) -> None:
        """Clear the exhausted mark (a resume, perhaps with a higher cap)."""
        self.client.delete(self.flag_key)

    def exhausted(self) -> bool:
        return bool(self.client.exists(self.flag_key))

    def spent(self) -> Decimal:
        return Decimal(int(self.client.get(self.spent_key) or 0)) / _MICRO
