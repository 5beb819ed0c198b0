-- Issue 36, defect 2: a product's sync request is deduplicated only against a row no processor
-- has claimed. The unique index counted a claimed row too, whose work may already have read the
-- prices, so a later click's changes waited for a sync that never came (a lost wake-up). The
-- sync click holds the product's advisory lock, so its NOT EXISTS sees the other click's row;
-- a row a processor gives back after a failure may now wait beside a newer one, and both run
-- (the sync is idempotent). This index serves that lookup.
SET LOCAL ROLE core_owner;

DROP INDEX core.outbox_one_pending_sync;
CREATE INDEX outbox_pending_sync ON core.outbox (product_id) WHERE kind = 'sync_product' AND processed_at IS NULL;

RESET ROLE;
