"""``rampart stack``: the distributed services on one machine under supervisord."""
