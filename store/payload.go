package store

import (
	"encoding/json"
	"fmt"
	"reflect"
	"unicode/utf8"

	"github.com/durafeed/durafeed/durable"
)

// MaxDocumentBytes is Cosmos DB's limit on one document: 2 MB, the length
// of its JSON encoding. A work item or history event whose document would
// exceed it is refused with a permanent error before anything is written.
// A document within the limit can still be refused by the service (413,
// also permanent) when the request carrying it, a transactional batch
// with its framing, exceeds 2 MB.
const MaxDocumentBytes = 2 * 1024 * 1024

// checkPayload is the store's check of a payload before it is encoded
// into a document: every string reachable from v (a work item, an event)
// must be valid UTF-8, since JSON encoding would silently replace invalid
// bytes with U+FFFD and the stored payload would differ from the caller's.
func checkPayload(what string, v any) error {
	if field, ok := validUTF8(reflect.ValueOf(v), ""); !ok {
		return fmt.Errorf("%s: %s is not valid UTF-8", what, field)
	}
	return nil
}

// checkSize refuses a document whose JSON encoding exceeds
// MaxDocumentBytes. payload is the length of the encoded payload the
// document embeds: the document is encoded (to measure it) only when that
// could come near the limit.
func checkSize(what string, payload int, doc any) error {
	if payload < MaxDocumentBytes/8 {
		return nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(b) > MaxDocumentBytes {
		return fmt.Errorf("%s: its document is %d bytes, over Cosmos DB's 2 MB (%d bytes) document limit: %w", what, len(b), MaxDocumentBytes, durable.ErrTooLarge)
	}
	return nil
}

// validUTF8 walks v and reports the first string field (by its path) that
// is not valid UTF-8.
func validUTF8(v reflect.Value, path string) (string, bool) {
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			if path == "" {
				path = "a string"
			}
			return path, false
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return validUTF8(v.Elem(), path)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			if f, ok := validUTF8(v.Field(i), fieldPath(path, t.Field(i).Name)); !ok {
				return f, false
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", true // bytes, not text
		}
		for i := range v.Len() {
			if f, ok := validUTF8(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); !ok {
				return f, false
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if f, ok := validUTF8(it.Key(), path+" key"); !ok {
				return f, false
			}
			if f, ok := validUTF8(it.Value(), path+" value"); !ok {
				return f, false
			}
		}
	}
	return "", true
}

func fieldPath(path, name string) string {
	if path == "" {
		return "field " + name
	}
	return path + "." + name
}
