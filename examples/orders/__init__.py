"""Order fulfilment: charge, reserve stock, create a shipping label, send an email."""
