package access

import (
	"encoding"
	"fmt"
)

// Role is what a token may do in its namespace. The roles are ordered: each
// may do what the ones below it may. The zero Role is no role and allows
// nothing.
type Role int

const (
	// RoleReader reads intents and waits on them.
	RoleReader Role = iota + 1
	// RoleAgent also enqueues and cancels: what an agent or a service needs.
	RoleAgent
	// RoleOperator also resolves unknown intents and decides approvals:
	// only a person who checked the provider should move an unknown intent
	// on.
	RoleOperator
)

// RoleDefault is the role of a token entry that names none.
const RoleDefault = RoleAgent

var roleNames = [...]string{RoleReader: "reader", RoleAgent: "agent", RoleOperator: "operator"}

// ParseRole returns the role named s: reader, agent or operator.
func ParseRole(s string) (Role, error) {
	for r := RoleReader; r <= RoleOperator; r++ {
		if roleNames[r] == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("the role %q is not reader, agent or operator", s)
}

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r >= RoleReader && r <= RoleOperator }

// Allows reports whether r may do what need may.
func (r Role) Allows(need Role) bool { return r.Valid() && need.Valid() && r >= need }

// String returns the role's name, as tokens and messages spell it.
func (r Role) String() string {
	if !r.Valid() {
		return fmt.Sprintf("Role(%d)", int(r))
	}
	return roleNames[r]
}

// MarshalText returns the role's name.
func (r Role) MarshalText() ([]byte, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("access: no role %d", int(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText parses a role's name.
func (r *Role) UnmarshalText(b []byte) error {
	role, err := ParseRole(string(b))
	if err != nil {
		return err
	}
	*r = role
	return nil
}

var (
	_ encoding.TextMarshaler   = Role(0)
	_ encoding.TextUnmarshaler = (*Role)(nil)
)
