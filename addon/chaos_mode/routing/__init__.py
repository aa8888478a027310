"""The pool: eligibility, strategies, tiers, sticky conversations, the fair wait queue, slots, cooldowns,
its status."""
