package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/outbox-dev/outbox/outbox"
)

// TokenMinLength is the shortest token accepted: a guessable token is no
// token.
const TokenMinLength = 16

// Token is one API token: the namespace it acts for, its role, and its
// SHA-256 (the token itself is never kept where a hash will do).
type Token struct {
	// Hash is the token's SHA-256.
	Hash [sha256.Size]byte
	// Namespace is the namespace the token acts for.
	Namespace string
	// Role is what the token may do.
	Role Role

	secret string
}

// NewToken returns the token secret for namespace with role.
func NewToken(secret, namespace string, role Role) Token {
	return Token{Hash: sha256.Sum256([]byte(secret)), Namespace: namespace, Role: role, secret: secret}
}

// Secret returns the token itself, or "" for a token configured by its hash.
func (t Token) Secret() string { return t.secret }

// Fingerprint names the token in logs and on intents, without the token:
// "sha256:" and the first 12 hex digits of its hash.
func (t Token) Fingerprint() string { return "sha256:" + hex.EncodeToString(t.Hash[:6]) }

// Actor is the audit actor of what the token does: APIActor of its
// fingerprint.
func (t Token) Actor() string { return APIActor(t.Fingerprint()) }

// Match returns the token of tokens whose secret is presented, comparing
// SHA-256 sums in constant time. Every entry is compared, match or not, so
// that the time taken depends only on the number of tokens configured, not
// on which one (if any) matched.
func Match(tokens []Token, presented string) (Token, bool) {
	sum := sha256.Sum256([]byte(presented))
	found := -1
	for i := range tokens {
		if subtle.ConstantTimeCompare(sum[:], tokens[i].Hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Token{}, false
	}
	return tokens[found], true
}

// ParseTokens parses OUTBOX_API_TOKENS: entries separated by commas, each
// token:namespace[:role] or sha256:<64 hex digits>:namespace[:role].
func ParseTokens(list string) ([]Token, error) {
	var tokens []Token
	for i, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		t, err := parseTokenEntry(entry)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		tokens = append(tokens, t)
	}
	return tokens, CheckDuplicates(tokens)
}

// ParseTokenFile parses OUTBOX_API_TOKENS_FILE: one entry a line, as
// ParseTokens'; blank lines and lines starting with # are ignored.
func ParseTokenFile(content string) ([]Token, error) {
	var tokens []Token
	for i, line := range strings.Split(content, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseTokenEntry(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		tokens = append(tokens, t)
	}
	return tokens, CheckDuplicates(tokens)
}

// parseTokenEntry parses token:namespace[:role], or
// sha256:<64 hex digits>:namespace[:role] for a token given by its hash. Its
// errors never quote the token.
func parseTokenEntry(entry string) (Token, error) {
	parts := strings.Split(entry, ":")
	var t Token
	if parts[0] == "sha256" {
		if len(parts) < 3 || len(parts) > 4 {
			return t, errors.New("expected sha256:<64 hex digits>:namespace[:role]")
		}
		b, err := hex.DecodeString(parts[1])
		if err != nil || len(b) != sha256.Size {
			return t, errors.New("the hash must be 64 hex digits")
		}
		copy(t.Hash[:], b)
		parts = parts[1:]
	} else {
		if len(parts) < 2 || len(parts) > 3 {
			return t, errors.New("expected token:namespace[:role] (a token cannot contain a colon)")
		}
		if len(parts[0]) < TokenMinLength {
			return t, fmt.Errorf("the token is shorter than %d characters", TokenMinLength)
		}
		t.Hash, t.secret = sha256.Sum256([]byte(parts[0])), parts[0]
	}
	t.Namespace, t.Role = parts[1], RoleDefault
	if err := outbox.ValidateNamespace(t.Namespace); err != nil {
		return t, fmt.Errorf("the namespace %q is invalid: %w", t.Namespace, err)
	}
	if len(parts) == 3 {
		role, err := ParseRole(parts[2])
		if err != nil {
			return t, err
		}
		t.Role = role
	}
	return t, nil
}

// CheckDuplicates refuses a token listed twice: which namespace it would act
// for would be a guess.
func CheckDuplicates(tokens []Token) error {
	seen := map[[sha256.Size]byte]int{}
	for i, t := range tokens {
		if j, ok := seen[t.Hash]; ok {
			return fmt.Errorf("entries %d and %d are the same token", j+1, i+1)
		}
		seen[t.Hash] = i
	}
	return nil
}
