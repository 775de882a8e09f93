"""The gateway (`rmi serve`): answers from the model behind an alias, batched; feedback on them, durable before it
is acknowledged and flushed as batch files into feedback/incoming/; metrics; a chat page. The pipeline never
imports it: it meets the pipeline only through the registry's alias and the batch files it writes."""
