package access

// Action is what a principal asks to do in its namespace. Each needs one
// role (Action.Role), the same over the HTTP API, the MCP server and the
// operator console, so that what a role may do is written here alone.
type Action string

const (
	// ActionRead reads intents and effects, and waits on intents.
	ActionRead Action = "read"
	// ActionEnqueue records an intent.
	ActionEnqueue Action = "enqueue"
	// ActionCancel cancels a pending intent.
	ActionCancel Action = "cancel"
	// ActionResolve moves an unknown intent on.
	ActionResolve Action = "resolve"
	// ActionApprove approves an intent awaiting approval.
	ActionApprove Action = "approve"
	// ActionDeny denies an intent awaiting approval.
	ActionDeny Action = "deny"
)

// actionRoles is the least role each action needs: an agent's are those
// whose outcome it can judge itself; resolving and deciding approvals need
// a person who checked the provider or the request (RoleOperator).
var actionRoles = map[Action]Role{
	ActionRead:    RoleReader,
	ActionEnqueue: RoleAgent,
	ActionCancel:  RoleAgent,
	ActionResolve: RoleOperator,
	ActionApprove: RoleOperator,
	ActionDeny:    RoleOperator,
}

// Role returns the least role that may do a; the zero Role, which allows
// and is allowed nothing, for a string that is no action.
func (a Action) Role() Role { return actionRoles[a] }

// Allow reports whether a principal of role may do a.
func Allow(role Role, a Action) bool { return role.Allows(a.Role()) }

// AllowNamed reports whether any of the roles named by names may do a:
// the scopes of an MCP token, which hold its role's name. A name that is
// no role allows nothing.
func AllowNamed(names []string, a Action) bool {
	for _, name := range names {
		if role, err := ParseRole(name); err == nil && Allow(role, a) {
			return true
		}
	}
	return false
}
