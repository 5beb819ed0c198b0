-- A switch quote remembers when its confirmation made the change, so a second confirmation of
-- that very quote (a double click) is answered as the first was, while a quote from another tab
-- meets the truthful refusal ("already scheduled: undo it first") rather than a success for a
-- switch it did not make.
SET LOCAL ROLE core_owner;

ALTER TABLE billing.switch_quotes ADD COLUMN confirmed_at timestamptz;
GRANT UPDATE (confirmed_at) ON billing.switch_quotes TO console_runtime;

RESET ROLE;
