-- Issue 41: fair and prioritised delivery (DESIGN §5d). Fairness is a rule of the one lease claim
-- (shared/core/src/lease/sql.rs, `Queue::fair_pick`), not a second queue; this migration only adds
-- what that rule and the provider's pace read.
--
-- notifications.priority: the kind's rank, written once when the listener commits the row
-- (shared/core/src/delivery/priority.rs, the one table; docs/delivery.md). Lower is sooner:
-- 0 = a cancellation or a same-day change, 1 = another change, 2 = routine (confirmations, reminders).
-- Rows from before this migration are routine.
ALTER TABLE notifications
    ADD COLUMN priority smallint NOT NULL DEFAULT 2
        CONSTRAINT notifications_priority_check CHECK (priority BETWEEN 0 AND 2);

-- workspaces.delivery_weight: a workspace's share of every claim among the workspaces with due work
-- (2 = twice the turns of a workspace at 1). Optional; 1 for everyone by default.
ALTER TABLE workspaces
    ADD COLUMN delivery_weight real NOT NULL DEFAULT 1
        CONSTRAINT workspaces_delivery_weight_check CHECK (delivery_weight >= 0.1 AND delivery_weight <= 100);

-- A token bucket per provider and region (SES account rate, SNS SMS rate), shared by every sender
-- (Lambdas and `clinic dev` alike) because it lives here. `tokens` is refilled at `rate_per_sec`
-- from `refilled_at` up to `burst`; after a throttling answer the rate is multiplied by
-- `slow_factor` until `slowed_until`. Bound: one row per (provider, region) a deployment sends
-- through — a handful; nothing else is kept (no history, no content).
CREATE TABLE provider_rate_buckets (
    provider      text NOT NULL CONSTRAINT provider_rate_buckets_provider_length CHECK (length(provider) <= 40),
    region        text NOT NULL CONSTRAINT provider_rate_buckets_region_length CHECK (length(region) <= 40),
    rate_per_sec  double precision NOT NULL CONSTRAINT provider_rate_buckets_rate_check CHECK (rate_per_sec > 0),
    burst         double precision NOT NULL CONSTRAINT provider_rate_buckets_burst_check CHECK (burst >= 1),
    tokens        double precision NOT NULL,
    refilled_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    slow_factor   double precision NOT NULL DEFAULT 1
        CONSTRAINT provider_rate_buckets_slow_factor_check CHECK (slow_factor > 0 AND slow_factor <= 1),
    slowed_until  timestamptz,
    throttled     bigint NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (provider, region)
);
GRANT SELECT, INSERT, UPDATE ON provider_rate_buckets TO clinic_app;
