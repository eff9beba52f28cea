"""A run after it ran: bench records, frames, analysis, validity badges, comparability and
the comparison that pages and exports show."""
