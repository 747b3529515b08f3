// Package intent is studio's domain: what a client asks for and what
// studio promises about it, with nothing of HTTP, SQL or the generators.
//
// An intent is a request a client may send any number of times under one
// request id: a generation (a batch of tasks to render), a publication (a
// batch's assets handed to a channel) or an upload (an image's bytes). The
// package holds
//
//   - the inputs and their strict decoding (DecodeGeneration,
//     DecodePublication): unknown members, duplicates and wrong types are
//     refused, defaults applied, so that one input has one normalized form;
//   - the fingerprint of a normalized input (Fingerprint: SHA-256 of its
//     RFC 8785 canonical JSON with the actor and the operation), by which a
//     retry is told from a conflicting reuse of its request id;
//   - the records it makes (Batch, Task, Asset, Publication) and their
//     states;
//   - the Service, which runs an intent as check -> plan -> commit: a
//     replay answers the record made the first time, other input under a
//     bound id is a conflict, and a new id is planned once under a keyed
//     lock and committed with its binding in one transaction;
//   - the error kinds (Error, the E* codes), which httpapi maps to
//     statuses in one place.
//
// It defines the ports it needs (IntentStore, Planner, Locker,
// PublicationStore, UploadStore) and imports none of the packages that
// implement them: store/ and planner/ plug into it; httpapi/ and the
// workers use it.
package intent
