-- Media (docs/pricing.md, docs/ledger.md). Prices beside the token ones,
-- each picodollars, 0..10^12, NULL unpriced: per second of input audio
-- (transcription), per input character (speech), per output image (the
-- default when image_prices names neither the image's quality and size nor
-- its size), and per input and output token that is audio or image.
-- image_prices: {"<size>" | "<quality>/<size>": picodollars}, checked by
-- the admin API as the data plane checks it. A ledger row's media units:
-- input audio in milliseconds, speech characters, images answered. Added
-- to the partitioned parent (PostgreSQL 11+ adds them to every partition;
-- a constant default rewrites nothing); the writer refuses negative units
-- (cp_ledger.c's row_problem), so no CHECK has to scan the ledger. Routes
-- may now serve the media capabilities.

ALTER TABLE model_catalog
  ADD COLUMN audio_second_price bigint CHECK (audio_second_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN character_price bigint CHECK (character_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN image_price bigint CHECK (image_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN media_input_price bigint CHECK (media_input_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN media_output_price bigint CHECK (media_output_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN image_prices jsonb CHECK (jsonb_typeof(image_prices) = 'object');
ALTER TABLE price_overrides
  ADD COLUMN audio_second_price bigint CHECK (audio_second_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN character_price bigint CHECK (character_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN image_price bigint CHECK (image_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN media_input_price bigint CHECK (media_input_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN media_output_price bigint CHECK (media_output_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN image_prices jsonb CHECK (jsonb_typeof(image_prices) = 'object');
ALTER TABLE ledger ADD COLUMN audio_ms bigint NOT NULL DEFAULT 0,
  ADD COLUMN characters bigint NOT NULL DEFAULT 0,
  ADD COLUMN images bigint NOT NULL DEFAULT 0;
ALTER TABLE routes DROP CONSTRAINT routes_capability_check;
ALTER TABLE routes ADD CONSTRAINT routes_capability_check
  CHECK (capability IN ('chat', 'embeddings', 'vision', 'transcription', 'speech', 'image'));
