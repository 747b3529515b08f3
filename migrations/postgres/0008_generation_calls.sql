-- What a task bought of its generator and what happened to it: the paid
-- generation calls it made (an OpenAI generate, a ComfyUI POST /prompt),
-- and its history, one line per event worth a note (a prompt the provider
-- lost and submitted again, an image URL that expired and was made again,
-- an image of another size than asked), each line ended by a newline.
-- Steps write both (store.StepSave's Calls and Note). (The twin of
-- SQLite's 0008; 0007 has none here, see README.md.)
ALTER TABLE tasks ADD COLUMN generation_calls integer NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN history text NOT NULL DEFAULT '';
