-- A product's rename takes its row FOR NO KEY UPDATE, as the spec's lock table gives the product
-- row (issue 36). A plain UNIQUE on name made name a key of the row: an UPDATE that changed it took
-- the row FOR UPDATE, so a rename waited on (and held up) the FOR KEY SHARE that conferrals,
-- grants, the outbox and tier inserts take on the product through their foreign keys. The same
-- uniqueness, kept by an expression index, is no key (nothing can reference it). The service
-- stores names trimmed, so btrim(name) is the name itself; the index keeps the constraint's name,
-- which the refusal "A product named … exists already" is read from.
ALTER TABLE core.products DROP CONSTRAINT products_name_key;
CREATE UNIQUE INDEX products_name_key ON core.products (btrim(name));
