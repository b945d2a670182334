package declared

import "github.com/outbox-dev/outbox/effects"

// The capabilities of an MCP upstream's recorded tool: the build breaks if
// a method drifts from its interface. They belong beside UpstreamTool;
// they sit in a file of their own while the upstream code moves.
var (
	_ effects.Effect              = (*UpstreamTool)(nil)
	_ effects.AlwaysClaimer       = (*UpstreamTool)(nil)
	_ effects.ApprovalRuleChecker = (*UpstreamTool)(nil)
	_ effects.ArgsSchemaer        = (*UpstreamTool)(nil)
	_ effects.Declarer            = (*UpstreamTool)(nil)
	_ effects.DedupeWindower      = (*UpstreamTool)(nil)
	_ effects.Describer           = (*UpstreamTool)(nil)
	_ effects.NamespaceScoper     = (*UpstreamTool)(nil)
	_ effects.Queuer              = (*UpstreamTool)(nil)
	_ effects.QueueSizer          = (*UpstreamTool)(nil)
	_ effects.Reconciler          = (*UpstreamTool)(nil)
	_ effects.RequestReconciler   = (*UpstreamTool)(nil)
	_ effects.ToolNamer           = (*UpstreamTool)(nil)
	_ effects.UpstreamTooler      = (*UpstreamTool)(nil)
)
