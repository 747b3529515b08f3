package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"studio/client"
)

// exampleServer starts a studio (the real HTTP API, store and workers)
// for an example; a real one runs with `studio serve`.
func exampleServer() (*stack, func()) {
	dir, err := os.MkdirTemp("", "studio-example-")
	if err != nil {
		panic(err)
	}
	s, err := startStack(dir, true)
	if err != nil {
		panic(err)
	}
	return s, func() { s.stop(); os.RemoveAll(dir) }
}

// Submit a generation, replay it safely, and wait for it to end.
func Example() {
	srv, stop := exampleServer()
	defer stop()
	c, err := client.New(srv.URL, client.WithToken(srv.Token))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	req := client.GenerationRequest{
		RequestID: "walk-1",
		Prompt:    "a knight in the rain, side view",
		Sets:      []client.FrameSet{{Collection: "walk-cycle", Frames: []string{"f01", "f02"}}},
	}
	created, err := c.CreateGeneration(ctx, req)
	if err != nil {
		panic(err)
	}
	fmt.Println("tasks:", created.Record.TaskCount, "replayed:", created.Replayed)

	// The same id and input again (a retry after a lost answer, say):
	// the same batch, nothing new.
	again, err := c.CreateGeneration(ctx, req)
	if err != nil {
		panic(err)
	}
	fmt.Println("same batch:", again.Record.ID == created.Record.ID, "replayed:", again.Replayed)

	b, err := c.WaitBatch(ctx, created.Record.ID, client.WaitOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(b.State, b.Counts.Succeeded, "of", b.TaskCount)
	// Output:
	// tasks: 4 replayed: false
	// same batch: true replayed: true
	// succeeded 4 of 4
}

// Follow a batch with a progress callback.
func ExampleClient_WaitBatch() {
	srv, stop := exampleServer()
	defer stop()
	c, _ := client.New(srv.URL, client.WithToken(srv.Token))
	ctx := context.Background()
	created, err := c.CreateGeneration(ctx, client.GenerationRequest{
		Prompt:    "a robot waving",
		Providers: []string{"sketch"},
		Sets:      []client.FrameSet{{Collection: "wave", Frames: []string{"f1", "f2", "f3"}}},
	})
	if err != nil {
		panic(err)
	}
	ended := 0
	b, err := c.WaitBatch(ctx, created.Record.ID, client.WaitOptions{
		OnProgress: func(p client.Progress) {
			if p.Task != nil && client.Ended(p.Task.State) {
				ended++ // a real program would draw p.Batch.Counts
			}
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(b.State, "tasks seen ending:", ended)
	// Output:
	// succeeded tasks seen ending: 3
}

// Save a batch's images.
func ExampleClient_Download() {
	srv, stop := exampleServer()
	defer stop()
	c, _ := client.New(srv.URL, client.WithToken(srv.Token))
	ctx := context.Background()
	created, err := c.CreateGeneration(ctx, client.GenerationRequest{
		Prompt: "a cat", Candidates: 1,
		Sets: []client.FrameSet{{Collection: "sit", Frames: []string{"f1"}}},
	})
	if err != nil {
		panic(err)
	}
	if _, err := c.WaitBatch(ctx, created.Record.ID, client.WaitOptions{}); err != nil {
		panic(err)
	}
	dir, _ := os.MkdirTemp("", "frames-")
	defer os.RemoveAll(dir)
	files, err := c.Download(ctx, created.Record.ID, dir, client.DownloadOptions{})
	if err != nil {
		panic(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f.Path))
	}
	sort.Strings(names)
	fmt.Println(names)
	// Output:
	// [sit-f1-mosaic-1.png sit-f1-sketch-1.png]
}

// A refused input is an *Error with the server's problem document.
func ExampleError() {
	srv, stop := exampleServer()
	defer stop()
	c, _ := client.New(srv.URL, client.WithToken(srv.Token))
	_, err := c.CreateGeneration(context.Background(), client.GenerationRequest{
		RequestID: "bad-1",
		Prompt:    "",
		Sets:      []client.FrameSet{{Collection: "c", Frames: []string{"a"}}},
	})
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Detail)
		for _, f := range e.Errors {
			fmt.Println(f.Field, f.Message)
		}
	}
	// Output:
	// 400 The request body is invalid.
	// prompt must not be empty
}
