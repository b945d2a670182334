package intentdb

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// EncodeCursor returns the cursor of a listing whose last intent is id: the
// next page is of the intents older than it (ListParams.BeforeID). The
// library's List and the console's list hand out the same cursors, opaque
// to their users, so that what they hold may change without a change of
// theirs.
func EncodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("id:" + strconv.FormatInt(id, 10)))
}

// DecodeCursor returns the id a cursor of EncodeCursor holds, and false for
// any other string.
func DecodeCursor(cursor string) (int64, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, false
	}
	s, ok := strings.CutPrefix(string(raw), "id:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}
