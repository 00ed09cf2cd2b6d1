"""What operators use: a home's view, the cause of a hold, metrics, plots, the admin API and
the doctor."""
