package store

import (
	"net/http"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

const pkHeader = "x-ms-documentdb-partitionkey"

// pkHeaderPolicy repairs the partition key header of azcosmos v1.5.0,
// which quotes string components with strconv.QuoteToASCII: characters
// outside the Basic Multilingual Plane become \UXXXXXXXX and some control
// characters \xXX, \a or \v, none of which is JSON, so the service refuses
// instance ids containing them (emoji, for example). The policy rewrites
// those escapes into JSON's \uXXXX form (surrogate pairs above U+FFFF).
type pkHeaderPolicy struct{}

func (pkHeaderPolicy) Do(req *policy.Request) (*http.Response, error) {
	h := req.Raw().Header
	if v := h.Get(pkHeader); v != "" && strings.Contains(v, `\`) {
		h.Set(pkHeader, fixPKHeader(v))
	}
	return req.Next()
}

func fixPKHeader(v string) string {
	var b strings.Builder
	b.Grow(len(v) + 8)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' || i+1 >= len(v) {
			b.WriteByte(c)
			continue
		}
		n := v[i+1]
		switch {
		case n == 'U' && i+10 <= len(v):
			r, err := strconv.ParseUint(v[i+2:i+10], 16, 32)
			if err != nil {
				b.WriteString(v[i : i+2])
				i++
				continue
			}
			r1, r2 := utf16.EncodeRune(rune(r))
			if r1 == 0xFFFD && r2 == 0xFFFD {
				writeU(&b, rune(r))
			} else {
				writeU(&b, r1)
				writeU(&b, r2)
			}
			i += 9
		case n == 'x' && i+4 <= len(v):
			r, err := strconv.ParseUint(v[i+2:i+4], 16, 8)
			if err != nil {
				b.WriteString(v[i : i+2])
				i++
				continue
			}
			writeU(&b, rune(r))
			i += 3
		case n == 'a':
			writeU(&b, 7)
			i++
		case n == 'v':
			writeU(&b, 11)
			i++
		default:
			b.WriteByte(c)
			b.WriteByte(n)
			i++
		}
	}
	return b.String()
}

func writeU(b *strings.Builder, r rune) {
	const hexd = "0123456789abcdef"
	b.WriteString(`\u`)
	b.WriteByte(hexd[(r>>12)&15])
	b.WriteByte(hexd[(r>>8)&15])
	b.WriteByte(hexd[(r>>4)&15])
	b.WriteByte(hexd[r&15])
}
