"""The small tables spark-flow keeps beside the queues (subscriptions, transition history,
run-time settings, hold times, commands, status, the home's registry, writer claims): their
columns, declared once, and what each change means."""
