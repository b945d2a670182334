package outbox

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
)

// NamespaceDefault is the namespace of callers that name none.
const NamespaceDefault = "default"

// KeyMaxLength is the longest key accepted.
const KeyMaxLength = 255

// NamespaceMaxLength is the longest namespace accepted.
const NamespaceMaxLength = 64

// ValidateKey checks an idempotency key: 1 to 255 printable ASCII characters
// (0x21 to 0x7E). It returns an *Error with code invalid_key.
func ValidateKey(key string) error {
	return validateToken("key", key, KeyMaxLength)
}

// ValidateNamespace checks a namespace: 1 to 64 printable ASCII characters.
func ValidateNamespace(namespace string) error {
	return validateToken("namespace", namespace, NamespaceMaxLength)
}

func validateToken(field, s string, maxLen int) error {
	if s == "" {
		return &Error{Code: CodeInvalidKey, Field: field, Message: "must not be empty"}
	}
	if len(s) > maxLen {
		return &Error{Code: CodeInvalidKey, Field: field, Message: "must be at most " + strconv.Itoa(maxLen) + " characters"}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return &Error{Code: CodeInvalidKey, Field: field, Message: "must be printable ASCII (0x21 to 0x7E) without spaces; byte " + strconv.Itoa(i) + " is not"}
		}
	}
	return nil
}

// ProviderKey is the key sent to providers for the intent id, (namespace,
// key). It is the same derivation as the SQL function outbox_provider_key,
// which is the one actually used (an intent's ProviderKey field holds what
// was stored); this copy lets tools compute it without a database.
//
// The id is part of it so that a key enqueued again after its intent was
// pruned, a new action, does not send the old provider key, which a
// provider that still remembers it would answer with the old result.
// Intents stored before migration 002 keep the key of (namespace, key).
func ProviderKey(namespace, key string, id int64) string {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(id, 10)))
	return "obx_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}
