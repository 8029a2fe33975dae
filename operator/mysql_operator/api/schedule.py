"""A backup schedule as the CronJob controller parses it: the one spec check the CRD's schema cannot make.

Both the validating webhook (at admission) and the reconciler (a second line, for objects admitted
while the webhook was down) ask `valid_schedule`.
"""

from __future__ import annotations

from croniter import croniter

CRON_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})


def valid_schedule(schedule: str) -> bool:
    """What the CronJob controller accepts: five fields or a macro (croniter alone allows six)."""
    schedule = schedule.strip()
    if schedule.startswith("@"):
        return schedule in CRON_MACROS
    return len(schedule.split()) == 5 and croniter.is_valid(schedule)
