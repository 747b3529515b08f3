package generator

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"text/template"

	"github.com/go-json-experiment/json"
)

// MaxTaskSeed is the largest seed TaskSeed gives: seeds fit in 32 bits, the
// range every sampler takes (ComfyUI's go to 2^64-1, many others stop at
// 2^32-1).
const MaxTaskSeed = 1<<32 - 1

// TaskSeed is the seed of one task, the same on every try of it:
//
//	seed = first 8 bytes, big-endian, of SHA-256(
//	         "studio/seed/v1", base, collection, frame, decimal candidate)
//	       mod 2^32
//
// where every part is written as its length (8 bytes, big-endian) then its
// UTF-8 bytes, and base is the request's seed in decimal ("7"), or
// "task:" + the task id when the request has none. Candidates and frames
// differ; a retry of a task, or a resumed one, has the same seed; two
// batches with the same seed give the same seeds to the same collection,
// frame and candidate, whatever the generator.
func TaskSeed(job Job) int64 {
	base := "task:" + job.Key
	if job.Seed != nil {
		base = strconv.FormatInt(*job.Seed, 10)
	}
	h := sha256.New()
	for _, s := range []string{"studio/seed/v1", base, job.Collection, job.Frame, strconv.Itoa(job.Candidate)} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	sum := h.Sum(nil)
	return int64(binary.BigEndian.Uint64(sum[:8]) & MaxTaskSeed)
}

// PromptData is what a prompt_template sees of a task.
type PromptData struct {
	Prompt     string
	Subjects   []string
	Collection string
	Frame      string
	// Candidate counts from 1.
	Candidate int
	// Seed is TaskSeed's seed of the task.
	Seed int64
	// Params is the request's params object (numbers are float64).
	Params map[string]any
}

// promptTemplate renders a task's prompt: the catalog's prompt_template,
// or the request's prompt when there is none.
type promptTemplate struct {
	t *template.Template // nil: the request's prompt
}

// parsePromptTemplate parses a prompt_template and runs it once on a
// sample task, so that a template naming a field PromptData lacks is
// refused at start rather than at the first task.
func parsePromptTemplate(src string) (promptTemplate, error) {
	if src == "" {
		return promptTemplate{}, nil
	}
	t, err := template.New("prompt_template").Parse(src)
	if err != nil {
		return promptTemplate{}, fmt.Errorf("prompt_template: %w", err)
	}
	sample := PromptData{Prompt: "a knight", Subjects: []string{"knight"}, Collection: "c", Frame: "f",
		Candidate: 1, Seed: 1, Params: map[string]any{}}
	if err := t.Execute(&strings.Builder{}, sample); err != nil {
		return promptTemplate{}, fmt.Errorf("prompt_template: %w", err)
	}
	return promptTemplate{t: t}, nil
}

// render gives the prompt of a job. An error (a template failing on this
// job's data, an empty prompt) is permanent: a retry renders the same.
func (p promptTemplate) render(job Job) (string, error) {
	if p.t == nil {
		return job.Prompt, nil
	}
	params := map[string]any{}
	if len(job.Params) > 0 {
		if err := json.Unmarshal(job.Params, &params); err != nil {
			return "", Permanent(fmt.Errorf("prompt_template: params: %w", err))
		}
	}
	data := PromptData{
		Prompt: job.Prompt, Subjects: job.Subjects, Collection: job.Collection, Frame: job.Frame,
		Candidate: job.Candidate, Seed: TaskSeed(job), Params: params,
	}
	var b strings.Builder
	if err := p.t.Execute(&b, data); err != nil {
		return "", Permanent(fmt.Errorf("prompt_template: %w", err))
	}
	out := strings.TrimSpace(b.String())
	if out == "" {
		return "", Permanent(fmt.Errorf("prompt_template: the prompt is empty for this task"))
	}
	return out, nil
}
