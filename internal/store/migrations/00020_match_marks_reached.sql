-- Incremental matching (docs/design.md, "Incremental matching"): a mark
-- now counts the obligations created before where its pass reached (its
-- clock, or its window's end if earlier, less the clock skew), not before
-- its clock less the skew. A mark counted the old way is compared with
-- the new count and could agree by chance while rows were written with
-- old times: every mark is forgotten once, and each account's next pass
-- matches whole ("no completed pass matched what the mirror holds").

-- +goose Up
DELETE FROM reconcile.match_marks;

-- +goose Down
-- Nothing to put back: a pass leaves a new mark.
SELECT 1;
