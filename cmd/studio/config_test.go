package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Every field of Config is set by a flag of the table, every flag is taken
// by at least one command, and no command has two flags of one name.
func TestFlagTableCoversConfig(t *testing.T) {
	var c Config
	v := reflect.ValueOf(&c).Elem()
	bound := map[uintptr]string{}
	for _, d := range flags {
		if d.in == 0 || d.in&^everyCommand != 0 {
			t.Errorf("--%s: taken by commands %b, want a non-empty set of %b", d.name, d.in, everyCommand)
		}
		if !strings.HasPrefix(d.env, "STUDIO_") {
			t.Errorf("--%s: environment variable %q does not start with STUDIO_", d.name, d.env)
		}
		bound[reflect.ValueOf(d.field(&c)).Pointer()] = d.name
	}
	for i := 0; i < v.NumField(); i++ {
		if _, ok := bound[v.Field(i).Addr().Pointer()]; !ok {
			t.Errorf("Config.%s has no flag in the table", v.Type().Field(i).Name)
		}
	}
	for cmd, name := range commandNames {
		seen := map[string]bool{}
		for _, d := range flags {
			if d.in&cmd != 0 {
				if seen[d.name] {
					t.Errorf("%s: two flags --%s", name, d.name)
				}
				seen[d.name] = true
			}
		}
	}
}

// sample is a value of a flag's type that differs from every default.
func sample(p any) (text string, want any) {
	switch p.(type) {
	case *string:
		return "127.0.0.1:4321", "127.0.0.1:4321"
	case *int:
		return "7", 7
	case *int64:
		return "7", int64(7)
	case *time.Duration:
		return "7s", 7 * time.Second
	case *age:
		return "7d", age(7 * 24 * time.Hour)
	}
	panic(fmt.Sprintf("no sample for %T", p))
}

// Each command's flag set takes exactly the table's flags for it, each from
// the command line and from its environment variable, and refuses the rest.
func TestFlagTableParses(t *testing.T) {
	for cmd, name := range commandNames {
		for _, d := range flags {
			text, want := sample(d.field(&Config{}))
			cfg := DefaultConfig()
			fs, _ := newFlagSet(cmd, &cfg, io.Discard)
			err := fs.Parse([]string{"--" + d.name, text})
			if d.in&cmd == 0 {
				if err == nil {
					t.Errorf("%s took --%s, which the table does not give it", name, d.name)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s --%s %s: %v", name, d.name, text, err)
			} else if got := reflect.ValueOf(d.field(&cfg)).Elem().Interface(); got != want {
				t.Errorf("%s --%s %s set %v", name, d.name, text, got)
			}
			t.Run(name+"/"+d.env, func(t *testing.T) {
				t.Setenv(d.env, text)
				cfg := DefaultConfig()
				fs, applyEnv := newFlagSet(cmd, &cfg, io.Discard)
				if err := parse(fs, nil, applyEnv); err != nil {
					t.Fatal(err)
				}
				if got := reflect.ValueOf(d.field(&cfg)).Elem().Interface(); got != want {
					t.Fatalf("%s=%s set --%s to %v", d.env, text, d.name, got)
				}
			})
		}
	}
}

// Each command, run as from the command line, lists in its help exactly
// the table's flags for it (besides its own, such as bench's --ops): the
// commands are wired to the table.
func TestCommandsTakeTheTablesFlags(t *testing.T) {
	args := map[commands][]string{
		cmdServe: {"serve"}, cmdWorker: {"worker"}, cmdMigrate: {"migrate"},
		cmdToken: {"token", "create"}, cmdBench: {"bench"}, cmdAssets: {"assets", "copy"},
		cmdPrune: {"prune"}, cmdVacuum: {"vacuum"},
	}
	listed := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	for cmd, a := range args {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append(a, "-h"), &out, &errb); code != 0 {
			t.Fatalf("%v -h: exit %d: %s", a, code, errb.String())
		}
		got := map[string]bool{}
		for _, m := range listed.FindAllStringSubmatch(errb.String(), -1) {
			got[m[1]] = true
		}
		for _, d := range flags {
			if want := d.in&cmd != 0; got[d.name] != want {
				t.Errorf("%v -h lists --%s: %v, want %v", a, d.name, got[d.name], want)
			}
		}
	}
}
